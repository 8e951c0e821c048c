"""``python -m clients.torch``: the PyTorch trainer (see ``clients.torch.trainer``);
``python -m clients.torch transfer ...``: the VTAB-1k transfer learner (``clients.torch.transfer``);
``python -m clients.torch cog ...``: the ImageNet-CoG linear evaluation (``clients.torch.cog``).

Exit status: 0 done, 2 bad input, 3 a server fault; errors are one line on stderr.
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["transfer"]:
        from clients.torch.transfer import main as transfer_main

        sys.exit(transfer_main(sys.argv[2:]))
    if sys.argv[1:2] == ["cog"]:
        from clients.torch.cog import main as cog_main

        sys.exit(cog_main(sys.argv[2:]))
    from clients.torch.trainer import main

    sys.exit(main())
