"""The ImageNet-CoG linear evaluation's protocol values: the paper's, and their sources.

The CoG paper (supplementary B) and the reference's ``logreg.py`` defaults: SGD with
momentum 0.9, 100 epochs, batches of 1024, learning rate and weight decay searched
over [0.1, 100] x [1e-12, 1e-4] (``LR_INTV`` and ``WD_INTV``; 30 trials: a 6 x 5 grid
here), images resized on the server (shorter side bicubic to 224, centre crop), N in 1,
2, 4, ... 128 and all, five seeds. The evaluation (``clients.cog_eval``) and its command
line (``clients.trainer_args.build_cog_parser``) both read them here. The reference
normalises with ImageNet's mean and standard deviation, the convention of the models it
evaluates; here a backbone is fed its own convention in CoG as in every protocol
(``clients.backbone_contract``: ImageNet's statistics on [0, 1] for one that declares none,
[-1, 1] for our named backbones).
"""

from __future__ import annotations

MOMENTUM = 0.9
LR_RANGE = (1e-1, 1e2)
WD_RANGE = (1e-12, 1e-4)
DEFAULT_GRID = (6, 5)
EPOCHS = 100
BATCH_SIZE = 1024
IMAGE_SIZE = 224
EXTRACT_BATCH_SIZE = 128
PAPER_SHOTS = (1, 2, 4, 8, 16, 32, 64, 128)
DEFAULT_SHOTS = (0, *PAPER_SHOTS)  # 0 = all
DEFAULT_SEEDS = (1, 2, 3, 4, 5)
RESIZE = "shorter_bicubic_center_crop"
