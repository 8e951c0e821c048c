"""Control baselines (issue 12): data regimes, the blind guess, calibrated risk and CCI.

Pure functions (no I/O, no gRPC, LMDB or frameworks): the callers read a task's splits
and labels from its store (``store.vtab_records``) and pass label arrays in.

- ``regimes``: the keyed pool order (uniform, or one per class first), regime n, its train/val parts,
  default regimes and fingerprints;
- ``stratified``: the stratified regime draw, scikit-learn's ``StratifiedShuffleSplit`` as the
  control-baselines reference calls it;
- ``blind``: the blind guess, classification (most frequent label) and regression
  (mean for L2, median for L1);
- ``calibration``: cR, the Calibrated Cumulative Improvement and the calibration JSON;
- ``reference_csv``: the control-baselines reference's results CSV as calibration entries;
- ``sources``: any packed classification source as the task ``source:<store>``, with fixed
  held-out train/val/test splits.
"""

from sampler_server.core.baselines.blind import (
    BlindGuess,
    RegressionBlindGuess,
    RegressionLoss,
    blind_guess,
    parse_loss,
    regression_blind_guess,
)
from sampler_server.core.baselines.calibration import (
    ROLES,
    RiskEntry,
    calibrate,
    calibrate_run,
    calibrate_task,
    calibrated_risk,
    cci,
    notes,
    parse_entries,
)
from sampler_server.core.baselines.regimes import (
    DEFAULT_REGIME_COUNT,
    DEFAULT_SAMPLING,
    MIN_PER_CLASS,
    ONE_PER_CLASS_FIRST,
    ORDERED_SAMPLINGS,
    POOL_SPLIT,
    REGIME_SPLITS,
    SAMPLINGS,
    STRATIFIED,
    TEST_SPLIT,
    UNIFORM,
    VAL_FRACTION,
    RegimeSplit,
    build_regime,
    check_regime_size,
    check_regime_split,
    check_sampling,
    check_seed,
    default_regimes,
    pool_order,
    regime_fingerprint,
    regime_key,
    regime_positions,
    regime_regression,
    val_count,
)
from sampler_server.core.baselines.sources import (
    SOURCE_SPLITS,
    SOURCE_TASK_PREFIX,
    SourceSplit,
    is_source_task,
    source_task,
    split_source,
    store_of,
)

__all__ = [
    "DEFAULT_REGIME_COUNT",
    "DEFAULT_SAMPLING",
    "MIN_PER_CLASS",
    "ONE_PER_CLASS_FIRST",
    "ORDERED_SAMPLINGS",
    "POOL_SPLIT",
    "REGIME_SPLITS",
    "ROLES",
    "SAMPLINGS",
    "STRATIFIED",
    "SOURCE_SPLITS",
    "SOURCE_TASK_PREFIX",
    "TEST_SPLIT",
    "UNIFORM",
    "VAL_FRACTION",
    "BlindGuess",
    "RegimeSplit",
    "RegressionBlindGuess",
    "RegressionLoss",
    "RiskEntry",
    "SourceSplit",
    "blind_guess",
    "build_regime",
    "calibrate",
    "calibrate_run",
    "calibrate_task",
    "calibrated_risk",
    "cci",
    "check_regime_size",
    "check_regime_split",
    "check_sampling",
    "check_seed",
    "default_regimes",
    "is_source_task",
    "notes",
    "parse_entries",
    "parse_loss",
    "pool_order",
    "regime_fingerprint",
    "regime_key",
    "regime_positions",
    "regime_regression",
    "regression_blind_guess",
    "source_task",
    "split_source",
    "store_of",
    "val_count",
]
