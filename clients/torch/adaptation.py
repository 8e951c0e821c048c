"""The MAML family's, the Finetune baseline's and the transfer learners' episodes in torch: ``clients.md_learners``'s
``Adaptation`` and ``Finetunable`` over explicit weights (``torch.func.functional_call``), so
``md_learners.adapted_query_logits`` and ``finetuned_query_logits`` run the loops.

The episode is in the bucketed layout (``clients.buckets``): ``images`` holds the support rows,
the query rows, then padding. The inner steps embed the support rows alone (their batch norms
take the support's moments); the query pass embeds support and query in one batch, so the query
is normalised by the moments of the support re-embedded with the adapted weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from clients.md_learners import Finetuning
from clients.torch.models import classifier_logits, episode_norm


class TorchAdaptation:
    def __init__(self, backbone: nn.Module, images: torch.Tensor, labels: torch.Tensor, support: int, query: int,
                 ways: int, batch_norm: str, out_dim: int, support_rows: int | None = None) -> None:
        self.backbone, self.images, self.batch_norm = backbone, images, batch_norm
        self.support, self.query, self.ways, self.out_dim = support, query, ways, out_dim
        # the rows a support pass embeds: the support's bucket (``clients.buckets``), so the inner
        # steps meet few shapes; the rows past the support enter no moment and no loss
        self.support_rows = support if support_rows is None else min(max(support, support_rows), images.shape[0])
        self.support_labels = labels[:support]
        self.names = [name for name, _ in backbone.named_parameters()]

    def _embed(self, weights: list[torch.Tensor], rows: int, query: int) -> torch.Tensor:
        with episode_norm(self.backbone, self.batch_norm, self.support, query):
            embedded = functional_call(self.backbone, dict(zip(self.names, weights, strict=True)),
                                       (self.images[:rows],))
        return embedded.float()

    def initial_weights(self) -> list[torch.Tensor]:
        return [parameter for _, parameter in self.backbone.named_parameters()]

    def zero_head(self) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.images.device
        return (torch.zeros(self.ways, self.out_dim, device=device, requires_grad=True),
                torch.zeros(self.ways, device=device, requires_grad=True))

    def _support(self, weights: list[torch.Tensor]) -> torch.Tensor:
        """The support rows embedded alone (their batch norms taking the support's moments)."""
        return self._embed(weights, self.support_rows, 0)[:self.support]

    def prototype_head(self, weights: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        embedded = self._support(weights)
        one_hot = F.one_hot(self.support_labels, self.ways).to(embedded.dtype)
        prototypes = one_hot.t() @ embedded / one_hot.sum(0).clamp_min(1.0).unsqueeze(1)
        return 2.0 * prototypes, -prototypes.pow(2).sum(1)

    def support_gradients(self, weights: list[torch.Tensor], head: tuple[Any, Any]
                          ) -> tuple[list[torch.Tensor], tuple[Any, Any]]:
        # the head as a variable of its own, as the reference's loop variables: the backbone's
        # gradient takes no path through Proto-MAML's initialisation of it
        weight, bias = (t.detach().requires_grad_() for t in head)
        logits = self._support(weights) @ weight.t() + bias
        loss = F.cross_entropy(logits, self.support_labels)
        found = torch.autograd.grad(loss, [*weights, weight, bias], allow_unused=True)  # no graph: first order
        gradients = [torch.zeros_like(t) if g is None else g for t, g in zip([*weights, weight, bias], found,
                                                                               strict=True)]
        return gradients[:-2], (gradients[-2], gradients[-1])

    def query_logits(self, weights: list[torch.Tensor], head: tuple[Any, Any]) -> torch.Tensor:
        weight, bias = head
        embedded = self._embed(weights, self.images.shape[0], self.query)
        return embedded[self.support:self.support + self.query] @ weight.t() + bias

    # ---- the Finetune baseline (``md_learners.Finetunable``) ------------------------------------

    def support_features(self) -> torch.Tensor:
        with torch.no_grad():
            return self._support(self.initial_weights())

    def head_gradients(self, weights: list[torch.Tensor] | None, features: torch.Tensor | None,
                       head: tuple[Any, ...], settings: Finetuning, rows: torch.Tensor | None
                       ) -> tuple[list[torch.Tensor], tuple[Any, ...]]:
        """The support loss's gradients (summed over the examples, as the reference minimises the
        per-example vector, or their mean, ``settings.summed``): of the head, and of ``weights``
        where given (else on ``features``); over the support rows ``rows`` where given (a batch)."""
        head = tuple(t.detach().requires_grad_() for t in head)
        labels = self.support_labels if rows is None else self.support_labels[rows]
        with torch.enable_grad():
            if weights is not None:
                weights = [w.detach().requires_grad_() for w in weights]
                if rows is None:
                    features = self._support(weights)
                else:
                    with episode_norm(self.backbone, self.batch_norm, rows.shape[0], 0):
                        features = functional_call(self.backbone, dict(zip(self.names, weights, strict=True)),
                                                   (self.images[rows],)).float()
            elif rows is not None:
                features = features[rows]
            logits = classifier_logits(features, head, settings.classifier)
            loss = F.cross_entropy(logits, labels, reduction="sum" if settings.summed else "mean")
            sources = [*(weights or []), *head]
            found = torch.autograd.grad(loss, sources, allow_unused=True)
        gradients = [torch.zeros_like(t) if g is None else g for t, g in zip(sources, found, strict=True)]
        return gradients[:-len(head)], tuple(gradients[-len(head):])

    def batch_norm_parameters(self) -> list[bool]:
        norms = {id(p) for m in self.backbone.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
                 for p in m.parameters(recurse=False)}
        return [id(p) in norms for p in self.initial_weights()]

    def query_alone_logits(self, weights: list[torch.Tensor], head: tuple[Any, ...], settings: Finetuning
                           ) -> torch.Tensor:
        """The query rows embedded alone, their batch norms taking the query's own moments."""
        with episode_norm(self.backbone, self.batch_norm, self.query, 0):
            embedded = functional_call(self.backbone, dict(zip(self.names, weights, strict=True)),
                                       (self.images[self.support:self.support + self.query],))
        return classifier_logits(embedded.float(), head, settings.classifier)
