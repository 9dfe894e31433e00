"""Test-wide settings.

The tests build tiny models (d_model 32), for which PyTorch's intra-op threads cost more than they
save: on a 2-core CI machine, two threads that busy-wait for each other are slower than one, and
much slower when another process shares the cores. One thread makes the suite fast and its
timing predictable; results do not depend on the thread count beyond float rounding.
"""

import torch

torch.set_num_threads(1)
