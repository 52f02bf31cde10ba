"""The hazard of part A of the twelfth blind census (docs/log/2026-12-07-scan-blind-census-12-a.md), reproduced.

pycbc 2.11.0's bank veto caches the overlaps of each filter template with the bank-veto templates
under ``(id(template.params), id(psd))`` and keeps neither object. ``FilterBank.__getitem__`` gives
every template a fresh ``numpy.record`` as its ``params``, which dies with the template, and
pycbc_inspiral makes each template in turn and drops it; a later template whose ``params`` record
is born on a dead one's address is handed the dead template's overlaps.

Unlike the earlier parts' reproducers, this one does not place the object by force: the harness's
``land`` cannot put a ``numpy.record`` on a freed record's block (numpy serves another allocation
of that size class first; 20,000 tries in the census), and ``born_on_death_of`` cannot place an
instance of a class with its own ``__new__``. The test runs the package's own template loop
instead, in which the records' addresses recur by themselves (in the
census's runs: 62 to 84 of a 300-template bank, none in the first 40), and the control keeps every
template alive.

The package is pinned to the release the census read; the test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR --no-deps pycbc==2.11.0 lalsuite igwn-ligolw igwn-segments \
        'scipy<1.17' astropy pyerfa astropy-iers-data h5py mako markupsafe pyyaml packaging \
        python-dateutil six
    PYTHONPATH=DIR:$PWD .venv/bin/python -m pytest -p no:xdist cases/blind/test_blind_census_12_a.py -q
"""

from __future__ import annotations

import logging

import numpy as np

from cases.blind.pinned import Pins

PINS = Pins("pycbc==2.11.0")

_FLEN, _DELTA_F, _F_LOW = 2049, 0.25, 30.0


def _write_bank(path, mass1, mass2) -> None:
    import h5py

    with h5py.File(path, "w") as bank:
        bank["mass1"] = np.asarray(mass1, dtype=float)
        bank["mass2"] = np.asarray(mass2, dtype=float)
        bank["spin1z"] = np.zeros(len(mass1))
        bank["spin2z"] = np.zeros(len(mass1))
        bank["approximant"] = np.array([b"SPAtmplt"] * len(mass1))


def _templates_with_another_templates_overlaps(tmp_path, keep_alive: bool, count: int = 300) -> int:
    """One pass over a bank of ``count`` distinct templates as pycbc_inspiral makes them (each one
    generated inside a per-template function, used with the run's PSD and dropped on return),
    counting the templates whose cached bank-veto overlaps differ from the overlaps computed afresh
    for them. With ``keep_alive`` every template is kept (the control)."""
    bank_module = PINS.need("pycbc", "pycbc.waveform.bank")
    veto_module = PINS.need("pycbc", "pycbc.vetoes.bank_chisq")
    types = PINS.need("pycbc", "pycbc.types")
    logging.getLogger().setLevel(logging.WARNING)
    tmp_path.mkdir()
    bank_file, veto_file = tmp_path / "bank.hdf", tmp_path / "veto.hdf"
    _write_bank(bank_file, np.linspace(1.2, 3.0, count), np.linspace(1.1, 1.6, count)[::-1])
    _write_bank(veto_file, [1.4, 2.0, 5.0], [1.4, 1.5, 2.0])
    veto = veto_module.SingleDetBankVeto(str(veto_file), _FLEN, _DELTA_F, _F_LOW, np.complex64,
                                         approximant="SPAtmplt")
    bank = bank_module.FilterBank(str(bank_file), _FLEN, _DELTA_F, np.complex64,
                                  low_frequency_cutoff=_F_LOW, approximant="SPAtmplt")
    psd = types.FrequencySeries(np.ones(_FLEN, dtype=np.float32), delta_f=_DELTA_F)
    kept: list = []

    def template_triggers(t_num: int) -> bool:     # pycbc_inspiral:240-274, the bank veto part
        template = bank[t_num]
        cached = veto.cache_overlaps(template, psd)
        fresh = veto_module.template_overlaps(veto.filters, template, psd, _F_LOW)
        if keep_alive:
            kept.append(template)
        return not np.allclose(np.array(cached), np.array(fresh))

    return sum(template_triggers(t_num) for t_num in range(count))


def test_pycbc_bank_veto_gives_a_template_a_dead_templates_overlaps(tmp_path):
    """pycbc/vetoes/bank_chisq.py:206-212 caches a template's overlaps with the bank-veto templates
    under (id(template.params), id(psd)), holding neither; waveform/bank.py:879 gives each template
    a fresh numpy.record as params, which dies with it: a template whose params record is born on
    a dead one's address gets the dead template's overlaps (its bank chi-squared is computed
    against another template)."""
    assert _templates_with_another_templates_overlaps(tmp_path / "released", keep_alive=False) > 0
    assert _templates_with_another_templates_overlaps(tmp_path / "control", keep_alive=True) == 0
