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

if __name__ == "__main__":
    if sys.argv[1:2] == ["transfer"]:
        from clients.torch.vtab_transfer import main as transfer_main

        sys.exit(transfer_main(sys.argv[2:]))
    if sys.argv[1:2] == ["cog"]:
        from clients.torch.cog_eval import main as cog_main

        sys.exit(cog_main(sys.argv[2:]))
    if sys.argv[1:2] == ["evaluate"]:
        from clients.torch.evaluate import main as evaluate_main

        sys.exit(evaluate_main(sys.argv[2:]))
    from clients.torch.md_train import main

    status = main(sys.argv[2:] if sys.argv[1:2] == ["train"] else sys.argv[1:])
    if os.environ.get("WORLD_SIZE", "1").strip() not in ("", "0", "1"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
