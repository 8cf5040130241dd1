"""torch.distributed.init_process_group("gloo") first, then hvd.init() (what
Ray Train, Lightning's DDP and Accelerate leave behind): env:// under torchrun,
or tcp:// with this process's rank from HVL_TEST_RANK and no launcher
variables."""

import os

import launch_train
import torch.distributed as dist

if os.environ["HVL_TEST_INIT"] == "env":
    dist.init_process_group("gloo")
else:
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["HVL_TEST_PORT"],
                            rank=int(os.environ["HVL_TEST_RANK"]), world_size=2)
    assert "RANK" not in os.environ
launch_train.main()
dist.destroy_process_group()
