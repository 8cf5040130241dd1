"""ElasticSampler (``horovod.torch.elastic.ElasticSampler``)."""

import math
import random

import torch.utils.data


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset across the ranks like DistributedSampler, and
    re-partitions what is left of the epoch after a reset.

    Put it into the TorchState, call record_batch(batch_idx, batch_size) after
    each batch and set_epoch(epoch) at the end of each epoch.

    Args:
        dataset: the dataset (of constant size).
        shuffle: shuffle the indices (the same order on every rank).
        seed: the shuffle's seed (the same on every rank).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` afresh (call it at the end of an epoch)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank processed batch_size more samples."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Records that every rank processed len(indices) more samples."""
        self.processed_num += len(indices) * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def reset(self):
        from horovodlite.torch import _C
        if _C.is_initialized():
            from horovodlite.torch.basics import rank, size
            self.num_replicas, self.rank = size(), rank()
        else:
            self.num_replicas, self.rank = 1, 0
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[:(self.total_size - len(indices))]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
