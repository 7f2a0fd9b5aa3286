"""prepare_data_loader: this rank's part of a torch DataLoader's dataset (Ray's name; a
torch DistributedSampler that needs no process group and reshuffles by itself)."""
from torch.utils.data import DataLoader, IterableDataset, RandomSampler
from torch.utils.data.distributed import DistributedSampler

from ... import _core


class RankSampler(DistributedSampler):
    """torch's DistributedSampler over this rank's place in the fit (the same number of
    samples on every rank: the dataset padded by repeating its first indices, or cut when
    drop_last). The order is reshuffled every epoch: by set_epoch(epoch) when the loop calls
    it (DistributedSampler's way), otherwise by itself at each new iteration over the
    loader; every rank draws the same permutation (seed + epoch) and takes its part."""

    def __init__(self, dataset, *, shuffle=True, seed=0, drop_last=False):
        super().__init__(dataset, num_replicas=_core.world_size(), rank=_core.world_rank(),
                         shuffle=shuffle, seed=seed, drop_last=drop_last)
        self._explicit = False
        self._next = 0

    def set_epoch(self, epoch: int) -> None:
        self._explicit = True
        super().set_epoch(epoch)

    def __iter__(self):
        if not self._explicit:
            self.epoch = self._next
            self._next += 1
        return super().__iter__()


def prepare_data_loader(data_loader, add_dist_sampler=True, move_to_device=True,
                        auto_transfer=False):
    """Local (every rank calls it the same way): a DataLoader like ``data_loader`` over this
    rank's part of its dataset (RankSampler: shuffled per epoch when ``data_loader``
    shuffled, else in order; the same number of batches on every rank). Batches stay on the
    CPU (get_device()). An IterableDataset, or a loader with a batch_sampler of its own, is
    refused: neither can be split by index."""
    from ... import train as _train

    _train._session._session("torch.prepare_data_loader")
    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"prepare_data_loader: a torch.utils.data.DataLoader is needed (got "
                        f"{type(data_loader).__name__})")
    if not add_dist_sampler:
        return data_loader
    ds = data_loader.dataset
    if isinstance(ds, IterableDataset):
        raise ValueError("prepare_data_loader: the loader's dataset is an IterableDataset, "
                         "which cannot be split by index: give each rank its own part "
                         "(train.get_context().get_world_rank()) or use a map-style dataset")
    if data_loader.batch_size is None:
        raise ValueError("prepare_data_loader: the loader has a batch_sampler of its own; "
                         "give it a batch_size and a map-style dataset instead")
    if isinstance(data_loader.sampler, DistributedSampler):
        sampler = data_loader.sampler  # already split (by the user)
    else:
        shuffle = isinstance(data_loader.sampler, RandomSampler)
        seed = 0
        gen = getattr(data_loader, "generator", None)
        if shuffle and gen is not None:
            seed = int(gen.initial_seed()) & 0x7FFFFFFF
        sampler = RankSampler(ds, shuffle=shuffle, seed=seed, drop_last=data_loader.drop_last)
    kw = dict(batch_size=data_loader.batch_size, sampler=sampler,
              num_workers=data_loader.num_workers, collate_fn=data_loader.collate_fn,
              pin_memory=False, drop_last=data_loader.drop_last,
              timeout=data_loader.timeout, worker_init_fn=data_loader.worker_init_fn,
              persistent_workers=data_loader.persistent_workers)
    if data_loader.num_workers > 0:
        kw["prefetch_factor"] = data_loader.prefetch_factor
        kw["multiprocessing_context"] = data_loader.multiprocessing_context
    return DataLoader(ds, **kw)


__all__ = ["prepare_data_loader", "RankSampler"]
