"""Small models of the wider bug class, each in a buggy and a fixed form.

* :mod:`mesh_cache` -- coordinates cached by ``id(mesh)`` (pytorch/pytorch#184526: a temporary
  submesh died and a new mesh at the same address got its coordinates).
* :mod:`result_cache` -- an id-keyed result cache that gives false hits after collection
  (wandb/wandb#1729).
* :mod:`quantizer_key` -- a recipe-state cache keyed by the ids of quantizers that are replaced
  and freed (the pattern of TE's dot-product-attention recipe cache).

Each module has ``Buggy`` and ``Fixed`` classes with the same interface and a ``REGISTRY``
accessor, so the harness's hygiene oracle (and the pytest sentinel) can scan them.
"""
