"""``python -m clients.torch``: the PyTorch trainer (see ``clients.torch.trainer``).

Exit status: 0 done, 2 bad input, 3 a server fault; errors are one line on stderr.
"""

import sys

from clients.torch.trainer import main

if __name__ == "__main__":
    sys.exit(main())
