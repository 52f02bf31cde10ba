"""The hazards of the second blind census (docs/log/2026-12-06-scan-blind-census-2.md), reproduced.

Every true hazard the census found, less one it could not run here (the PySpark twin of the
mlflow dataset numbering), and one latent one (mlflow's model-id map).

Each test works as those of ``test_blind_census.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control).

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install nnsight==0.8.1 shap==0.51.0 opencv-python-headless pytorch_memlab==0.3.2 \
        opt_einsum==3.4.0 datasets==5.2.0 mlflow-skinny==3.18.0 scikit-learn
    pip install --no-deps colossalai==0.5.0
    ./scripts/test cases/blind/test_blind_census_2.py -q

Where a package's own import would pull in far more than the registry needs (ColossalAI), the
test loads the one released file that holds the registry; where the registry's key is made
by a backend this machine lacks (CuPy), the test hands the released function a stand-in of
the backend call it makes; the function itself is the released one, unchanged.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
import types


from cases.blind.pinned import Pins, reborn
from harness.idreuse.landing import seed_pools

PINS = Pins("nnsight==0.8.1", "colossalai==0.5.0", "shap==0.51.0", "pytorch_memlab==0.3.2",
            "opt_einsum==3.4.0", "datasets==5.2.0", "mlflow-skinny==3.18.0")


def test_nnsight_saved_ids_push_an_unsaved_value_out_of_the_trace():
    """tracing/tracer.py:248 marks a saved value by id() in a thread-local set that is cleared
    only when the outermost trace exits, and push_result (:320) hands the user's frame every
    variable whose id is in it: a value saved and then dropped inside the trace leaves its id
    behind, and an unsaved value born on its address is pushed out as if saved."""
    tracer = PINS.need("nnsight", "nnsight.tracing.tracer")
    from nnsight.tracing.util import SerializedFrame
    import torch

    def pushed(reuse: bool) -> list:
        frame = SerializedFrame("<census>", 1, "census")
        tracer.inc()
        try:
            kept = seed_pools(lambda: torch.empty(0))
            box = [torch.zeros(3)]
            tracer.save(box[0])                     # h = layer.output.save()
            second = reborn(box, lambda: torch.ones(3)) if reuse else torch.ones(3)
            tracer.push_result(frame, {"scratch": second})    # never saved
            del kept
        finally:
            tracer.dec()
        return sorted(frame.f_locals)

    assert pushed(reuse=True) == ["scratch"]     # released: the unsaved value leaves the trace
    assert pushed(reuse=False) == []             # control


def test_colossalai_tensor_detector_reports_a_new_tensor_as_neither_new_nor_gone(tmp_path):
    """utils/tensor_detector/tensor_detector.py:93 keeps every tensor seen by a detect() in
    saved_tensor_info by id() and skips, in the next detect(), a tensor whose id and type name
    are there: a tensor born on a dead one's address is reported neither as new ("+") nor is
    the dead one reported as gone ("-")."""
    path = PINS.file("colossalai", "utils/tensor_detector/tensor_detector.py")
    spec = importlib.util.spec_from_file_location("colossalai_tensor_detector", path)
    tensor_detector = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tensor_detector)
    import torch

    def reported(reuse: bool) -> str:
        log = tmp_path / f"detect-{reuse}"
        detector = tensor_detector.TensorDetector(show_info=False, log=str(log))
        kept = seed_pools(lambda: torch.empty(0))
        box = [torch.zeros(2, 3)]
        detector.detect(include_cpu=True)
        second = reborn(box, lambda: torch.zeros(7, 5, 3)) if reuse else torch.zeros(7, 5, 3)
        detector.detect(include_cpu=True)
        report = log.with_suffix(".log").read_text().split("Detect Location")[1]
        del kept, second
        return report

    assert "(7, 5, 3)" not in reported(reuse=True)     # released: the new tensor is not listed
    assert "(7, 5, 3)" in reported(reuse=False)        # control


def test_shap_image_masker_blurs_with_a_dead_images_pixels():
    """maskers/_image.py:103-105 keeps the blurred background of the last image by id(x): an
    image born on the last one's address is masked with the last image's blur."""
    shap = PINS.need("shap", "shap")
    import numpy as np

    masker = shap.maskers.Image("blur(3,3)", shape=(8, 8, 1))
    hidden = np.zeros(64, dtype=bool)            # mask every pixel: the output is the blur

    def background(reuse: bool) -> float:
        kept = seed_pools(lambda: np.empty(0))
        box = [np.zeros(64, dtype=np.float32)]
        masker(hidden, box[0])
        second = reborn(box, lambda: np.ones(64, dtype=np.float32)) if reuse \
            else np.ones(64, dtype=np.float32)
        out = masker(hidden, second)[0]
        del kept
        return float(out.mean())

    assert background(reuse=True) == 0.0     # released: the dead image's (black) blur
    assert background(reuse=False) == 1.0    # control


def test_pytorch_memlab_reporter_names_a_new_tensor_after_a_dead_parameter():
    """mem_reporter.py:45 names each parameter of the model by id() once, at construction, and
    never forgets a name ("we cannot hold the reference to any tensors"): a tensor born on a
    dead parameter's address is reported under the parameter's name."""
    pytorch_memlab = PINS.need("pytorch_memlab", "pytorch_memlab")
    import torch

    def names(reuse: bool) -> list:
        model = torch.nn.Module()
        data = torch.zeros(9, 11)          # made first: a Parameter's own data would take the block
        kept = seed_pools(lambda: torch.nn.Parameter(data))
        model.kernel = torch.nn.Parameter(torch.zeros(3))
        reporter = pytorch_memlab.MemReporter(model)
        box = [model.kernel]
        if reuse:
            del model
        second = reborn(box, lambda: torch.nn.Parameter(data)) if reuse \
            else torch.nn.Parameter(data)
        reporter.collect_tensor()
        reporter.get_stats()
        stats = reporter.device_tensor_stat[torch.device("cpu")]
        del kept, second
        return [stat[0] for stat in stats if stat[1] == (9, 11)]

    assert any("kernel" in name for name in names(reuse=True))       # released: the dead one's name
    assert not any("kernel" in name for name in names(reuse=False))  # control


def test_opt_einsum_shared_conversion_returns_a_dead_arrays_copy(monkeypatch):
    """sharing.py:213 memoizes a backend conversion inside shared_intermediates() by id(array)
    without saving the array (the other wrappers call _save_tensors): when the conversion
    copies, as cupy.asarray does onto the device, an array born on a converted one's address
    is given the dead array's copy."""
    PINS.need("opt_einsum", "opt_einsum")
    import numpy as np
    from opt_einsum import shared_intermediates
    from opt_einsum.backends import cupy as oe_cupy

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(asarray=np.array))

    def converted(reuse: bool) -> float:
        with shared_intermediates():
            kept = seed_pools(lambda: np.empty(0))
            box = [np.zeros(5)]
            oe_cupy.to_cupy(box[0])
            second = reborn(box, lambda: np.ones(5)) if reuse else np.ones(5)
            out = oe_cupy.to_cupy(second)
            del kept
        return float(out.sum())

    assert converted(reuse=True) == 0.0     # released: the dead array's copy
    assert converted(reuse=False) == 5.0    # control


def test_datasets_from_sql_reads_a_dead_connections_cached_rows(tmp_path):
    """packaged_modules/sql/sql.py:73 puts id(con) into the config id that names the on-disk
    cache when the connection is not a URI string: a connection born on a dead one's address
    gets the dead connection's cached rows, whatever its own database holds."""
    datasets = PINS.need("datasets", "datasets")

    def fill(con, value: int):
        con.execute("create table t (x integer)")
        con.execute("insert into t values (?)", (value,))
        con.commit()
        return con

    def rows(reuse: bool) -> list:
        cache = tmp_path / f"cache-{reuse}"
        kept = seed_pools(lambda: sqlite3.connect(":memory:"))
        box = [fill(sqlite3.connect(":memory:"), 1)]
        datasets.Dataset.from_sql("select x from t", box[0], cache_dir=str(cache))
        box[0].close()
        if reuse:
            second = reborn(box, lambda: sqlite3.connect(":memory:"))
        else:
            second = sqlite3.connect(":memory:")
        fill(second, 2)
        answer = datasets.Dataset.from_sql("select x from t", second, cache_dir=str(cache))["x"]
        second.close()
        del kept
        return answer

    assert rows(reuse=True) == [1]     # released: the dead connection's rows
    assert rows(reuse=False) == [2]    # control


class _Estimator:
    """What the autologging manager reads of a fitted estimator: the run it was fitted in."""

    def __init__(self, run_id=None):
        self._mlflow_run_id = run_id


def test_mlflow_sklearn_metrics_go_to_a_dead_estimators_logged_model():
    """sklearn/__init__.py:896 records id(model) -> model_id in the process-wide autologging
    manager, with no finalizer (unlike the prediction results, :964). Latent: an estimator
    fitted with its model logged overwrites the entry; one fitted without (log_models=False,
    or logging failed) and born on a dead logged one's address gets the dead one's model."""
    sklearn_autolog = PINS.need("mlflow-skinny", "mlflow.sklearn")

    def model_id(reuse: bool):
        manager = sklearn_autolog._AutologgingMetricsManager()
        kept = seed_pools(lambda: object.__new__(_Estimator))
        box = [_Estimator("run-1")]
        manager.record_model_id(box[0], "m-first")
        second = reborn(box, lambda: _Estimator("run-2")) if reuse else _Estimator("run-2")
        del kept
        return manager.get_model_id_for_model(second)

    assert model_id(reuse=True) == "m-first"    # released: the dead estimator's model
    assert model_id(reuse=False) is None        # control: not logged, no model


def test_mlflow_sklearn_names_a_new_dataset_after_a_dead_one():
    """sklearn/__init__.py:928-941 tells the evaluation datasets of a run apart by id() (the
    first "X", the next "X-2"): a new dataset born on a dead one's address is named after the
    dead one, and its metrics are logged under the dead dataset's name."""
    sklearn_autolog = PINS.need("mlflow-skinny", "mlflow.sklearn")
    import numpy as np

    def register(manager, estimator, holder: list) -> str:
        X_test = holder[0]      # the name the manager reads off this frame, which ends here
        return manager.register_prediction_input_dataset(estimator, X_test)

    def names(reuse: bool) -> tuple:
        manager = sklearn_autolog._AutologgingMetricsManager()
        estimator = _Estimator("run-1")
        kept = seed_pools(lambda: np.empty(0))
        box = [np.zeros(4)]
        first = register(manager, estimator, box)
        later = [reborn(box, lambda: np.ones(4)) if reuse else np.ones(4)]
        second = register(manager, estimator, later)
        del kept
        return first, second

    first, second = names(reuse=True)
    assert second == first                       # released: the dead dataset's name
    first, second = names(reuse=False)
    assert second == f"{first}-2"                # control
