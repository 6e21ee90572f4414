"""Test datasets used by several test files (in a module of their own, so spawned processes can import them)."""
import random
import numpy as np
import torch
from timmdata.dataset import ImageDataset


class IndexDataset(ImageDataset):
    "The sample's index as its target, so a test can see which samples a loader returned."
    def __getitem__(self, i):
        img, _ = super().__getitem__(i)
        return img, i


class SeedDataset(torch.utils.data.Dataset):
    "Each sample reports the first numpy, torch and `random` draws of the worker that made it."
    transform = None
    def __len__(self): return 4
    def __getitem__(self, i):
        return torch.zeros(3, 2, 2, dtype=torch.uint8), (int(np.random.randint(0, 2**31 - 1)),
                                                         int(torch.randint(0, 2**31 - 1, ())), random.getrandbits(31))


class EnvTargetDataset(ImageDataset):
    "Each sample's target says what its worker's environment holds: WDS_SHUFFLE_SIZE * 10 + (1 if the Azure emulator is on) + (100 if an Azure account is named)."
    def __getitem__(self, i):
        import os
        img, _ = super().__getitem__(i)
        on = os.environ.get('AZURE_STORAGE_USE_EMULATOR') == 'true'  # a test's look at a worker's environment
        named = 'AZURE_STORAGE_ACCOUNT_NAME' in os.environ
        return img, int(os.environ.get('WDS_SHUFFLE_SIZE', '0')) * 10 + int(on) + 100 * int(named)
