#!/usr/bin/env python3
# PyTorch's launcher (torch.distributed.run, i.e. torchrun) with one fix for Debian 12's torch 1.13 under Python 3.11,
# whose Std.from_str returns None for every --redirects/--tee value (Enum members no longer equal their ints), so
# the launcher fails before it starts a process. Elsewhere it runs the launcher unchanged.
# usage: /usr/bin/python3 scripts/torchrun.py --no_python --nproc_per_node 2 build/harness/sparsebench train ...
import sys

from torch.distributed.elastic.multiprocessing.api import Std

if Std.from_str("0") is None:
    def _from_str(cls, text):
        if ":" not in text:
            return Std(int(text))
        return {int(rank): Std(int(value)) for rank, value in (part.split(":") for part in text.split(","))}
    Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "torchrun"
    main()
