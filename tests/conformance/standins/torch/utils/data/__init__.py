"""Stand-in ``torch.utils.data``: plain-Python base classes AgentJet subclasses at import time."""

from typing import Generic, TypeVar

from ajet_conformance import importstub as _importstub

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    def __getitem__(self, index):
        raise NotImplementedError


class IterableDataset(Dataset):
    def __iter__(self):
        raise NotImplementedError


class Sampler(Generic[T_co]):
    def __init__(self, data_source=None, *args, **kwargs):
        self.data_source = data_source


class SequentialSampler(Sampler):
    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(SequentialSampler):
    pass


class DataLoader(Generic[T_co]):
    def __init__(self, dataset, *args, **kwargs):
        self.dataset = dataset


_importstub.install("torch.utils.data", __import__(__name__, fromlist=["_"]))
