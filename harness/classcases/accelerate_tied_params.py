"""accelerate 1.15.0, ``accelerate/utils/fsdp_utils.py``: ``ensure_weights_retied`` wraps the
FSDP plugin's ``param_init_fn`` in a closure whose ``_tied_params`` dict is keyed by
``id(param)`` of the model's tied (meta) parameters, and ``Accelerator.prepare_model``
(``accelerator.py``, the FSDP branch) stores the wrapper back into the plugin. Every later
``prepare()`` wraps the wrapper again, so the first model's closure keeps running, with its
ids, for every model after it. Once the first model's meta parameter is gone and a new
model's tied parameter is born at its address, the old closure takes it for its own and ties
the new model's weights to the *first model's* materialised tensor.

:func:`run` drives ``ensure_weights_retied`` as ``prepare_model`` does -- twice, the second
time around the first wrapper -- and calls the resulting ``param_init_fn`` on each module of
a model with meta parameters, as FSDP does when it materialises them. The models are two
small ``torch.nn.Module`` language models with ``_tied_weights_keys`` (embedding and head
tied); the base ``param_init_fn`` materialises a module's parameters on the CPU and fills them
with the module's ``fill`` (1.0 in the first model, 2.0 in the second), as a loader fills a
module with its own checkpoint. The truth: the second model's head holds 2.0.
The fixed form pops each ``_tied_params`` entry when its parameter dies.
"""

from __future__ import annotations

import contextlib
import functools
import weakref

from harness.classcases.realbug import Form, Outcome
from harness.idreuse.landing import land, seed_pools
from harness.idreuse.morgue import quiet_allocator
from harness.oracles.hygiene import stale_ids

WIDTH = 4
VOCAB = 8
REGISTRY = "ensure_weights_retied._tied_params"


def _model_class():
    import torch

    class TinyLM(torch.nn.Module):
        """Embedding and head share one weight; built on the meta device, as FSDP's
        low-memory loading does."""

        _tied_weights_keys = ["head.weight"]

        def __init__(self, fill: float):
            super().__init__()
            with torch.device("meta"):
                self.embed = torch.nn.Embedding(VOCAB, WIDTH)
                self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
            self.head.weight = self.embed.weight
            self.embed.fill = self.head.fill = fill

    return TinyLM


def materialise(module):
    """A ``param_init_fn`` like FSDP's: the module's own parameters on the CPU, filled with the
    module's ``fill``."""
    import torch

    module.to_empty(device="cpu", recurse=False)
    with torch.no_grad():
        for param in module.parameters(recurse=False):
            param.fill_(module.fill)
    return module


def _tied_params(wrapper) -> dict:
    """The ``_tied_params`` dict the wrapper closes over."""
    names = wrapper.__code__.co_freevars
    return wrapper.__closure__[names.index("_tied_params")].cell_contents


@contextlib.contextmanager
def pruned_tied_params():
    """The fixed form: ``ensure_weights_retied`` as released, each ``_tied_params`` entry
    popped when its parameter dies."""
    from accelerate.utils import fsdp_utils

    released = fsdp_utils.ensure_weights_retied

    def ensure(param_init_fn, model, device):
        wrapper = released(param_init_fn, model, device)
        if wrapper is not param_init_fn:
            registry = _tied_params(wrapper)
            for name in model._tied_weights_keys:
                param = model.get_parameter(name)
                weakref.finalize(param, functools.partial(registry.pop, id(param), None))
        return wrapper

    fsdp_utils.ensure_weights_retied = ensure
    try:
        yield
    finally:
        fsdp_utils.ensure_weights_retied = released


def _prepare(plugin_fn, model):
    """What ``Accelerator.prepare_model`` does with the plugin's ``param_init_fn``, then what
    FSDP does with it: wrap, store back, call it on every module holding meta parameters."""
    from accelerate.utils import fsdp_utils

    wrapped = fsdp_utils.ensure_weights_retied(plugin_fn, model, "cpu")
    for module in list(model.modules()):
        if any(p.is_meta for p in module.parameters(recurse=False)):
            wrapped(module)
    return wrapped


def run(form: Form, reuse: bool = True) -> Outcome:
    """One reproduction: the fill of the second model's head after ``prepare``.
    ``reuse=False`` is the control: the first meta parameter stays alive, so no address comes back."""
    import torch

    TinyLM = _model_class()
    fix = pruned_tied_params() if form is Form.FIXED else contextlib.nullcontext()
    with fix:
        plugin_fn = materialise
        meta = torch.empty(VOCAB, WIDTH, device="meta")
        kept = seed_pools(lambda: torch.nn.Parameter(meta))
        first = TinyLM(1.0)
        box = [first.head.weight]                 # the tied meta parameter, kept until landing
        plugin_fn = _prepare(plugin_fn, first)    # prepare() #1 stores its wrapper in the plugin
        registry = _tied_params(plugin_fn)
        second = TinyLM(2.0)
        data = second.embed.weight.data
        with quiet_allocator():
            if reuse:
                landing, held = land(box, lambda: torch.nn.Parameter(data))
                tied, dead = landing.require(), {landing.address: "first model's tied meta parameter"}
                del held
            else:
                tied, dead = torch.nn.Parameter(data), {}
            stale = stale_ids({REGISTRY: registry}, dead)
        second.embed.weight = tied
        second.head.weight = tied
        del tied, kept
        _prepare(plugin_fn, second)               # prepare() #2 wraps the stored wrapper
        answer = float(second.head.weight.detach()[0, 0])
        del box
    return Outcome(answer, 2.0, reuse and landing.born is not None, tuple(stale))

