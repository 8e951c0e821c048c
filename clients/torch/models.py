"""Meta-Dataset backbones and heads in plain PyTorch (no torchvision).

Backbones map uint8 NHWC images to one embedding vector per image:
  - ``conv4``: 4 x [conv 3x3, 64 filters, BatchNorm, ReLU, max-pool 2], flattened
    (the Prototypical Networks embedding; 64 * (S // 16)^2 features at side S);
  - ``resnet18``: a 7x7/2 stem and 3x3/2 max-pool, basic blocks [2, 2, 2, 2] of
    widths 64/128/256/512, global average pooling to 512 features;
  - ``resnet50``: the same stem, bottleneck blocks [3, 4, 6, 3] of widths
    64/128/256/512 x 4 (stride on the 3x3 convolution, as torchvision's ResNet-50 v1.5),
    global average pooling to 2048 features; its layers carry torchvision's names
    (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer1.0.downsample.0``, ...), so a
    torchvision ``resnet50`` state dict without ``fc.*`` loads into it unchanged;
  - ``tiny``: three stride-2 3x3 convolutions, ReLU, global average pooling to 64
    features (fast on CPU: tests and the demo).
Inputs are scaled to [-1, 1] as Meta-Dataset does (``clients.torch.backbones.to_model_input``)
and laid out NCHW (channels_last in memory on CUDA, where cuDNN prefers it). The trainer runs backbones under bf16
autocast on CUDA; prototype distances are always computed in float32. Heads:
  - ``prototype_logits``: class means of the support embeddings, logits = negative
    squared Euclidean distance of each query embedding to each prototype;
  - ``LinearHead``: the classifier of MD's non-episodic ('inference-only') baseline.
Every function here is deterministic given the weights; nothing samples data.

Episode batch norm (``clients.batch_norm``): under ``episode_norm(backbone, mode, support,
query)`` every ``RowBatchNorm2d`` takes its moments from the episode's rows as the mode says
(``md``: the support rows' mean and biased variance normalise the support and the query,
the gradient flowing through them, in training and evaluation alike; ``transductive``: each
set its own), never its running statistics; padding rows enter no moment and come out as
zeros. ``running`` is the classifier's batch norm below.

Shape buckets (``clients.buckets``): an episode may arrive padded to a bucket of B rows
whose first n are valid. Under ``valid_rows(backbone, n)`` every batch norm
(``RowBatchNorm2d``) normalises the first n rows exactly as ``nn.BatchNorm2d`` would
normalise the unpadded batch, and updates its running statistics from them alone;
the padding rows come out as zeros. Every other layer treats rows independently, so
the valid rows' embeddings are the unpadded ones (up to float summation order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import distributed as dist
from torch import nn
from torch.nn import functional as F

from clients.backbone_contract import MD_BACKBONES
from clients.batch_norm import check_batch_norm
from clients.md_fixed_features import KNN_DISTANCE, MATCHING_EPSILON, REFERENCE_EPSILON
from clients.md_learners import (CLASSIFIER_EPSILON, LINEAR, RELATION_BN_EPSILON, RELATION_DEPTH, RELATION_HIDDEN,
                                 WEIGHT_NORM_INIT_EPSILON, Classifier, relation_pooled_side)
from clients.torch.layers import (EpisodeRows, GlobalAverage, RowBatchNorm2d, adopt_batch_norms, counted_batch_norm,
                                  counted_rows, episode_batch_norm, episode_norm, global_average, row_batch_norm,
                                  valid_rows)
from clients.torch.md_backbones import build_md_backbone

BACKBONES = ("conv4", "resnet18", "resnet50", "tiny", *MD_BACKBONES)


class Conv4(nn.Module):
    """Four conv blocks of 64 filters; the flattened feature map is the embedding."""

    def __init__(self, image_size: int, width: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for _ in range(4):
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), RowBatchNorm2d(width),
                       nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            channels = width
        self.features = nn.Sequential(*layers)
        side = image_size
        for _ in range(4):
            side //= 2
        if side < 1:
            raise ValueError(f"image_size: got {image_size}, expected at least 16 for conv4")
        self.out_dim = width * side * side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.features(x), 1)


class BasicBlock(nn.Module):
    """Two 3x3 convs with BatchNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = RowBatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = RowBatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                          RowBatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


class ResNet18(nn.Module):
    """ResNet-18 body: stem, four stages of two basic blocks, global average pooling."""

    def __init__(self, widths: tuple[int, ...] = (64, 128, 256, 512)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
                                  RowBatchNorm2d(widths[0]), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        blocks: list[nn.Module] = []
        channels = widths[0]
        for stage, width in enumerate(widths):
            stride = 1 if stage == 0 else 2
            blocks += [BasicBlock(channels, width, stride), BasicBlock(width, width, 1)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.out_dim = channels
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_average(self.blocks(self.stem(x)))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4, each with BatchNorm, and an
    identity (or 1x1 projection, ``downsample``) shortcut; torchvision's layer names."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = RowBatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = RowBatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = RowBatchNorm2d(out_channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                            RowBatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        out = self.bn3(self.conv3(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut, inplace=True)


class ResNet50(nn.Module):
    """ResNet-50 body: stem, four stages of [3, 4, 6, 3] bottleneck blocks, global average
    pooling to 2048 features (23,508,032 parameters: torchvision's ``resnet50`` less ``fc``)."""

    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), widths: tuple[int, ...] = (64, 128, 256, 512)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = RowBatchNorm2d(widths[0])
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        channels = widths[0]
        for stage, (count, width) in enumerate(zip(blocks, widths)):
            layer = []
            for block in range(count):
                layer.append(Bottleneck(channels, width, 2 if stage > 0 and block == 0 else 1))
                channels = width * Bottleneck.expansion
            self.add_module(f"layer{stage + 1}", nn.Sequential(*layer))
        self.out_dim = channels
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return global_average(x)


class Tiny(nn.Module):
    """Three stride-2 3x3 convolutions with ReLU, global average pooling: 64 features (fast
    on CPU: tests and the demo; no batch norm, so padding rows change nothing)."""

    out_dim = 64

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            GlobalAverage())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images)


def build_backbone(name: str, image_size: int) -> nn.Module:
    """A backbone by name; ``out_dim`` is its embedding size at ``image_size``."""
    if name == "conv4":
        return Conv4(image_size)
    if name == "resnet18":
        return ResNet18()
    if name == "resnet50":
        return ResNet50()
    if name == "tiny":
        return Tiny()
    if name in MD_BACKBONES:  # Meta-Dataset's own (``clients.torch.md_backbones``)
        return build_md_backbone(name, image_size)
    raise ValueError(f"backbone: got {name!r}, expected one of {', '.join(BACKBONES)}")


def prototype_logits(support: torch.Tensor, support_labels: torch.Tensor, query: torch.Tensor,
                     ways: int) -> torch.Tensor:
    """Logits [Nq, ways]: minus the squared distance of each query to each class mean."""
    one_hot = F.one_hot(support_labels, ways).to(support.dtype)           # [Ns, W]
    counts = one_hot.sum(0).clamp_min(1.0).unsqueeze(1)                    # [W, 1]
    prototypes = one_hot.t() @ support / counts                            # [W, D]
    distances = (query.pow(2).sum(1, keepdim=True) - 2.0 * query @ prototypes.t()
                 + prototypes.pow(2).sum(1).unsqueeze(0))
    return -distances


def matching_logits(support: torch.Tensor, support_labels: torch.Tensor, query: torch.Tensor, ways: int,
                    exact_cosine: bool = False) -> torch.Tensor:
    """Logits [Nq, ways]: Meta-Dataset's Matching Networks (``clients.md_fixed_features``
    says what and why): the log of each class's share of a softmax attention over the support
    rows, the support normalised as ``tf.nn.l2_normalize(..., epsilon=1e-3)``, the query not."""
    support = support * torch.rsqrt((support * support).sum(1, keepdim=True).clamp_min(MATCHING_EPSILON))
    if exact_cosine:
        query = query * torch.rsqrt((query * query).sum(1, keepdim=True).clamp_min(MATCHING_EPSILON))
    attention = torch.softmax(query @ support.t(), dim=1)                  # [Nq, Ns]
    return torch.log(attention @ F.one_hot(support_labels, ways).to(attention.dtype))


def nearest_neighbour_logits(support: torch.Tensor, support_labels: torch.Tensor, query: torch.Tensor, ways: int,
                             distance: str = KNN_DISTANCE) -> torch.Tensor:
    """Logits [Nq, ways]: Meta-Dataset's k-NN baseline at test time, the one-hot label of each
    query's nearest support row (the first on ties); no gradient reaches the features."""
    if distance == "l2":
        distances = torch.cdist(query, support)
    else:
        normalised = [x * torch.rsqrt((x * x).sum(1, keepdim=True).clamp_min(REFERENCE_EPSILON))
                      for x in (query, support)]
        distances = -(normalised[0] @ normalised[1].t())
    nearest = torch.argmin(distances, dim=1)
    return F.one_hot(support_labels[nearest], ways).to(query.dtype)


EPISODE_HEADS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]] = {
    "protonet": prototype_logits, "matchingnet": matching_logits, "knn": nearest_neighbour_logits}
"""Each episode head of ``clients.md_learners`` as a function of (support embeddings, their
labels, query embeddings, ways) -> logits."""


def classifier_logits(features: torch.Tensor, head: Sequence[torch.Tensor], classifier: Classifier) -> torch.Tensor:
    """Logits [N, ways] of a head (W [ways, D], b [ways], g [ways]) of the form ``classifier``
    (``clients.md_learners.Classifier``; the reference's ``linear_classifier_forward_pass``)."""
    weight, bias, gain = head
    if classifier.weight_norm:
        weight = weight * (gain * torch.rsqrt((weight * weight).sum(1))).unsqueeze(1)
    if not classifier.cosine:
        return features @ weight.t() + bias
    features = features * torch.rsqrt((features * features).sum(1, keepdim=True).clamp_min(CLASSIFIER_EPSILON))
    if not classifier.weight_norm:
        weight = weight * torch.rsqrt((weight * weight).sum(1, keepdim=True).clamp_min(CLASSIFIER_EPSILON))
    return classifier.multiplier * (features @ weight.t())


class RelationModule(nn.Module):
    """RelationNet's relation module (``clients.md_learners`` says what; functional_backbones.py
    ``relation_module``): pairs [P, 2C, S, S] -> scores [P] in (0, 1). Its batch norms always
    take the pairs' own moments (the reference passes it no moments and keeps no averages)."""

    def __init__(self, channels: int, side: int) -> None:
        super().__init__()
        depth, pooled = RELATION_DEPTH, relation_pooled_side(side)
        self.conv1 = nn.Conv2d(2 * channels, depth, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(depth, eps=RELATION_BN_EPSILON, track_running_stats=False)
        self.conv2 = nn.Conv2d(depth, depth, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(depth, eps=RELATION_BN_EPSILON, track_running_stats=False)
        self.fc1 = nn.Linear(depth * pooled * pooled, RELATION_HIDDEN)
        self.fc2 = nn.Linear(RELATION_HIDDEN, 1)
        self.channels, self.side = channels, side

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        x = pairs
        for conv, norm in ((self.conv1, self.bn1), (self.conv2, self.bn2)):
            x = F.relu(norm(conv(x)))
            if x.shape[-2] > 1:
                x = F.max_pool2d(x, 2, 2)
        return torch.sigmoid(self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))).squeeze(1)

    def scores(self, support: torch.Tensor, support_labels: torch.Tensor, query: torch.Tensor,
               ways: int) -> torch.Tensor:
        """Scores [Nq, ways] of flattened embeddings (torch's (C, H, W) order): each query's
        map paired with each class's mean support map."""
        shape = (self.channels, self.side, self.side)
        one_hot = F.one_hot(support_labels, ways).to(support.dtype)
        prototypes = (one_hot.t() @ support) / one_hot.sum(0).clamp_min(1.0).unsqueeze(1)
        count = query.shape[0]
        pairs = torch.cat([prototypes.reshape(1, ways, *shape).expand(count, -1, -1, -1, -1),
                           query.reshape(count, 1, *shape).expand(-1, ways, -1, -1, -1)], dim=2)
        return self(pairs.reshape(count * ways, 2 * self.channels, self.side, self.side)).reshape(count, ways)


def relation_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """RelationNet's loss: the mean squared error of the scores to the one-hot labels."""
    return F.mse_loss(scores, F.one_hot(labels, scores.shape[1]).to(scores.dtype))


def episode_loss(head: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of an episode's query logits under ``head``: RelationNet's MSE, else cross-entropy."""
    return relation_loss(logits, labels) if head == "relationnet" else F.cross_entropy(logits, labels)


class ProtoNet(nn.Module):
    """A backbone used as an episodic learner's embedding (support and query in one pass), its
    batch norms normalising each episode as ``batch_norm`` says (``clients.batch_norm``), the
    embeddings classified by ``head`` (one of ``EPISODE_HEADS``; Prototypical Networks' by default)."""

    def __init__(self, backbone: nn.Module, batch_norm: str = "md", head: str = "protonet",
                 relation: RelationModule | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.batch_norm = check_batch_norm(batch_norm)
        if head not in EPISODE_HEADS and head != "relationnet":
            raise ValueError(f"head: got {head!r}, expected one of {', '.join(EPISODE_HEADS)}, relationnet")
        if (head == "relationnet") != (relation is not None):
            raise ValueError("head: relationnet needs its relation module, and only it")
        self.head = head
        self.relation = relation

    def forward(self, support: torch.Tensor, support_labels: torch.Tensor, query: torch.Tensor,
                ways: int) -> torch.Tensor:
        with episode_norm(self.backbone, self.batch_norm, support.shape[0], query.shape[0]):
            embedded = self.backbone(torch.cat([support, query], 0))
        return self._logits(embedded, support_labels, support.shape[0], query.shape[0], ways, self.head)

    def packed(self, images: torch.Tensor, labels: torch.Tensor, support: int, query: int,
               ways: int, head: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [query, ways], query labels) of an episode in the bucketed layout
        (``clients.buckets``): ``images`` [B, 3, S, S] holds the support rows, the query
        rows, then padding; ``labels`` [B] likewise. Batch norms take no moment from the
        padding and the head (``head``, else the model's) sees exactly the unpadded embeddings."""
        with episode_norm(self.backbone, self.batch_norm, support, query):
            embedded = self.backbone(images)
        return self.packed_logits(embedded, labels, support, query, ways, head)

    def packed_logits(self, embedded: torch.Tensor, labels: torch.Tensor, support: int, query: int,
                      ways: int, head: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``packed``'s head on embeddings [B, D] of the bucketed layout (eager or compiled)."""
        return (self._logits(embedded, labels[:support], support, query, ways, head or self.head),
                labels[support:support + query])

    def _logits(self, embedded: torch.Tensor, support_labels: torch.Tensor, support: int, query: int,
                ways: int, head: str = "protonet") -> torch.Tensor:
        if head == "relationnet":  # a network of its own, under the step's autocast
            assert self.relation is not None
            return self.relation.scores(embedded[:support], support_labels, embedded[support:support + query],
                                        ways).float()
        # the head in float32 even under autocast: bf16 differences of large squared norms lose the signal
        with torch.autocast(device_type=embedded.device.type, enabled=False):
            embedded = embedded.float()
            return EPISODE_HEADS[head](embedded[:support], support_labels, embedded[support:support + query], ways)


class LinearHead(nn.Module):
    """Classifier over the union of the training classes (the batch learners' training head),
    of the form ``classifier`` (``clients.md_learners.Classifier``: plain, cosine, weight-normalised).
    A weight-normalised head's g (and, plain, its bias) waits for ``initialise``: the
    reference's data-dependent init from the first training batch; ``initialised`` keeps that
    it happened (checkpointed, so a resumed run does not redo it)."""

    def __init__(self, in_dim: int, num_classes: int, classifier: Classifier = LINEAR) -> None:
        super().__init__()
        self.classifier = classifier
        self.linear = nn.Linear(in_dim, num_classes, bias=not classifier.cosine)
        if classifier.weight_norm:
            self.gain = nn.Parameter(torch.ones(num_classes))
            self.register_buffer("initialised", torch.zeros((), dtype=torch.int64))

    @property
    def needs_initialising(self) -> bool:
        return self.classifier.weight_norm and not bool(self.initialised)

    @torch.no_grad()
    def initialise(self, features: torch.Tensor) -> None:
        """Weight norm's data-dependent init (``functional_classifiers.linear_classifier``): the
        features through the unit-norm directions, g = 1 / sqrt(var + 1e-10) of each output
        over the batch and, plain, b = -mean g; averaged over the ranks of a distributed run."""
        weight = self.linear.weight
        outputs = features.float() @ (weight * torch.rsqrt((weight * weight).sum(1, keepdim=True))).t()
        gain = torch.rsqrt(outputs.var(0, unbiased=False) + WEIGHT_NORM_INIT_EPSILON)
        values = [gain] if self.linear.bias is None else [gain, -outputs.mean(0) * gain]
        if dist.is_available() and dist.is_initialized():
            for value in values:
                dist.all_reduce(value)
                value.div_(dist.get_world_size())
        self.gain.copy_(values[0])
        if self.linear.bias is not None:
            self.linear.bias.copy_(values[1])
        self.initialised.fill_(1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.classifier == LINEAR:
            return self.linear(features)
        bias = self.linear.bias if self.linear.bias is not None else features.new_zeros(())
        gain = self.gain if self.classifier.weight_norm else features.new_ones(())
        return classifier_logits(features, (self.linear.weight, bias, gain), self.classifier)

    def decayed_kernels(self) -> list[nn.Parameter]:
        """The head's share of ``--weight-decay``: its kernel, unless weight-normalised (the
        reference regularises no weight-normalised head)."""
        return [] if self.classifier.weight_norm else [self.linear.weight]


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["BACKBONES", "BasicBlock", "Bottleneck", "Conv4", "EpisodeRows", "GlobalAverage", "LinearHead", "ProtoNet",
           "RelationModule", "ResNet18", "ResNet50", "RowBatchNorm2d", "Tiny", "EPISODE_HEADS", "adopt_batch_norms",
           "build_backbone", "classifier_logits", "counted_batch_norm", "counted_rows", "episode_batch_norm",
           "episode_loss", "episode_norm", "global_average", "matching_logits", "nearest_neighbour_logits",
           "parameter_count", "prototype_logits", "relation_loss", "row_batch_norm", "valid_rows"]
