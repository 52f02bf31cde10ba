"""``scripts/census-ceiling``: the strict precision a scan of the source alone could reach, from
the blind censuses' true and latent tables and a reasons file tagging each latent row.

Known bad: a reasons file whose rows drift from the logs' latent rows (a tree renamed, a row
missing) or that holds a tag other than K, D or U is refused with one line and exit 2; the
ceilings of a hand-made pair of logs are the ones worked out by hand.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "census-ceiling"

FIRST = """# census one

## Every true and latent hazard the census found, and what the scan said

True (2):

| tree | site | registry | scan |
| --- | --- | --- | --- |
| alpha | `a.py:1` | `_A` | default |
| beta | `b.py:2` | `_B` | low |

Latent (2):

| tree | site | registry | scan |
| --- | --- | --- | --- |
| gamma | `g.py:3` | `_G` | default |
| delta | `d.py:4` | `_D` | not reported |

## Reproducers

| tree | not | a | row |
| --- | --- | --- | --- |
| epsilon | x | y | z |
"""

SECOND = """# census two, part a

## Every true and latent hazard the census found, and what the scan said

Latent (2):

| tree | site | registry | scan |
| --- | --- | --- | --- |
| zeta | `z.py:5` | `_Z` | low |
| eta | `e.py:6` | `_E` | default |
"""


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def logs(tmp_path):
    d = tmp_path / "log"
    d.mkdir()
    (d / "2026-01-01-scan-blind-census.md").write_text(FIRST)
    (d / "2026-01-02-scan-blind-census-2-a.md").write_text(SECOND)
    return d


def reasons(tmp_path, rows):
    path = tmp_path / "reasons.tsv"
    path.write_text("index\tcensus\ttree\tone\n" + "".join(f"{i}\t{c}\t{t}\t{g}\n" for i, (c, t, g) in
                                                          enumerate(rows, 1)))
    return path


GOOD = [("1", "gamma", "K"), ("1", "delta", "U"), ("2a", "zeta", "D"), ("2a", "eta", "U")]


def test_the_ceilings_of_a_hand_made_pair_of_logs(tmp_path):
    done = run("--logs", logs(tmp_path), "--reasons", reasons(tmp_path, GOOD))
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[2:]}
    # census 1: 2 true, K 1, U 1: 2/4, 2/3, 2/3; census 2: no true, D 1, U 1; all: 2 true, 1, 1, 2
    assert rows["1"] == ["2", "1", "0", "1", "50.0%", "66.7%", "66.7%"]
    assert rows["2"][:4] == ["0", "0", "1", "1"] and rows["2"][4:] == ["0.0%"] * 3
    assert rows["all"] == ["2", "1", "1", "2", "33.3%", "40.0%", "50.0%"]


def test_a_reasons_file_that_drifted_from_the_logs_is_refused(tmp_path):
    d = logs(tmp_path)
    renamed = [GOOD[0], ("1", "deltoid", "U"), *GOOD[2:]]
    for rows, says in ((renamed, "reasons.tsv:3: 1 'deltoid', the logs' row there is 1 'delta'"),
                       (GOOD[:3], "reasons.tsv: 3 rows, the logs hold 4 latent rows"),
                       ([*GOOD[:3], ("2a", "eta", "X")], "reasons.tsv:5: tag 'X' is not one of K, D, U")):
        done = run("--logs", d, "--reasons", reasons(tmp_path, rows))
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


def test_the_committed_reasons_match_the_committed_census_logs():
    done = run()
    assert done.returncode == 0, done.stderr
    readers = [line for line in done.stdout.splitlines() if line.startswith("reader ")]
    assert len(readers) >= 2, done.stdout
