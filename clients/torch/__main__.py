"""``python -m clients.torch`` (or ``python -m clients.torch train``): the PyTorch trainer
(see ``clients.torch.md_train``);
``python -m clients.torch transfer ...``: the VTAB-1k transfer learner (``clients.torch.vtab_transfer``);
``python -m clients.torch cog ...``: the ImageNet-CoG linear evaluation (``clients.torch.cog_eval``).
``python -m clients.torch evaluate ...``: one checkpoint on MD, VTAB-1k and CoG, resumable
(``clients.torch.evaluate``). ``--help`` lists these commands (``clients.trainer_args.TRAINER_COMMANDS``).

Exit status: 0 done, 2 bad input (also: under ``--deterministic``, an op without a deterministic
kernel, named), 3 a server fault; errors are one line on stderr. ``--deterministic`` is applied
by each command before its model is built (``clients.torch.determinism``).

Under torchrun (WORLD_SIZE > 1) the trainer's process ends with ``os._exit`` once its
output is flushed: gloo's worker threads release a finished collective's tensors on
their own time, and one that does so while the interpreter shuts down takes the GIL
and aborts the process (SIGABRT, "terminate called without an active exception"),
failing a run that had completed. By then the run has closed its streams, written its
checkpoint and summary and destroyed its process group: nothing is left to finalize.
"""

import os
import sys

from clients.trainer_args import command_main

if __name__ == "__main__":
    command, main, arguments = command_main("clients.torch", sys.argv[1:])
    status = main(arguments)
    if command == "train" and os.environ.get("WORLD_SIZE", "1").strip() not in ("", "0", "1"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
