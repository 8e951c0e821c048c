"""``python -m clients.tf`` (or ``python -m clients.tf train``): the TensorFlow trainer (see ``clients.tf.md_train``);
``python -m clients.tf transfer ...``: the VTAB-1k transfer learner (``clients.tf.vtab_transfer``);
``python -m clients.tf cog ...``: the ImageNet-CoG linear evaluation (``clients.tf.cog_eval``).
``python -m clients.tf evaluate ...``: one checkpoint on MD, VTAB-1k and CoG, resumable
(``clients.tf.evaluate``). ``--help`` lists these commands (``clients.trainer_args.TRAINER_COMMANDS``).

TensorFlow's start-up chatter and its oneDNN notice are silenced unless the caller
set these variables. They take effect only if TensorFlow is not imported yet, i.e.
only if the package ``clients.tf`` does not import it eagerly on its own.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

if __name__ == "__main__":
    if sys.argv[1:2] == ["transfer"]:
        from clients.tf.vtab_transfer import main as transfer_main

        sys.exit(transfer_main(sys.argv[2:]))
    if sys.argv[1:2] == ["cog"]:
        from clients.tf.cog_eval import main as cog_main

        sys.exit(cog_main(sys.argv[2:]))
    if sys.argv[1:2] == ["evaluate"]:
        from clients.tf.evaluate import main as evaluate_main

        sys.exit(evaluate_main(sys.argv[2:]))
    from clients.tf.md_train import main

    sys.exit(main(sys.argv[2:] if sys.argv[1:2] == ["train"] else sys.argv[1:]))
