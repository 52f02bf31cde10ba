"""Our delayed-scaling recipe as TE's ``DelayedScaling``: field for field, nothing else set.

TE's autocast key is the recipe's text and the group, so two models of one recipe share TE's
global amax buffers, as models of one recipe do in TE's multi-model tests.
"""

from __future__ import annotations

from harness.fp8.recipe import AmaxComputeAlgo, DelayedScalingRecipe


def te_recipe(recipe: DelayedScalingRecipe, te_recipe_module):
    """TE's ``DelayedScaling`` with our recipe's format, margin, history, algorithm and reduction."""
    fmt = getattr(te_recipe_module.Format, recipe.fp8_format.value)
    algo = "max" if recipe.amax_compute_algo is AmaxComputeAlgo.MAX else "most_recent"
    return te_recipe_module.DelayedScaling(margin=recipe.margin, fp8_format=fmt,
                                           amax_history_len=recipe.amax_history_len,
                                           amax_compute_algo=algo, reduce_amax=recipe.reduce_amax)
