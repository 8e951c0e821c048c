"""Batch normalisation inside an episode: which rows' moments normalise which rows.

Meta-Dataset never normalises with running averages (CrossTransformers aside): in every
episode, at training, validation and test alike, each batch norm takes the mean and the
(biased) variance of the *support set's* activations, normalises the support set and the
query set with them, and the gradient flows through those moments (google-research/
meta-dataset ``models/functional_backbones.py`` ``bn``, ``learners/metric_learners.py``;
``transductive_batch_norm=False``, ``backprop_through_moments=True``;
../shared/reference/md_learners.md, section 2). The modes, by the names the trainers'
``--batch-norm`` takes:

- ``md`` (the default of every Meta-Dataset learner): the support set's moments for the
  support and the query; no running statistics are read. In training they are still
  updated from the support's moments (as the reference's unused moving averages), so a
  checkpoint can be evaluated under ``running`` too.
- ``transductive``: the support set and the query set each normalised with their own
  moments (MD's RelationNet and the Finetune baseline's test pass).
- ``running``: training normalises the support and query together and updates the
  running statistics; evaluation normalises with those running statistics (a classifier's
  usual batch norm; the trainers' behaviour before ``md``).

Rows are laid out support first, then query, then padding (``clients.buckets``): under
``md`` and ``transductive`` padding rows never enter a moment and come out as zeros.
A batch-trained model (``--model baseline``) normalises its training batches with their own
moments under every mode; its evaluation episodes follow the mode.
"""

from __future__ import annotations

BATCH_NORMS = ("md", "transductive", "running")
EPISODE_MOMENTS = ("md", "transductive")  # the modes that take an episode's own moments, never running averages


def check_batch_norm(mode: str) -> str:
    """``mode`` when it is one of ``BATCH_NORMS``; else ValueError naming it and the choices."""
    if mode not in BATCH_NORMS:
        raise ValueError(f"batch_norm: got {mode!r}, expected one of {', '.join(BATCH_NORMS)}")
    return mode
