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
    from clients.trainer_args import command_main

    _, main, arguments = command_main("clients.tf", sys.argv[1:])
    sys.exit(main(arguments))
