"""Training-framework pieces shared by tests/test_frameworks.py and the processes it starts (importable by spawned ranks)."""
import hashlib, json, os, sys
import torch


def batch_digest(x, y) -> str:
    "A short digest of one batch's images and targets (bit for bit)."
    h = hashlib.sha1(x.detach().cpu().contiguous().numpy().tobytes())
    h.update(y.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def lightning_pieces():
    "A tiny LightningModule that records each batch's digest, and a LightningDataModule over create_loader."
    import lightning as L
    from timmdata.dataset import ImageDataset
    from timmdata.loader import create_loader

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 4)
            self.seen = []  # (epoch, digest) of each training batch this process saw

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.seen.append((self.current_epoch, batch_digest(x, y)))
            return torch.nn.functional.cross_entropy(self.lin(x.float().mean((2, 3))), y)

        def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.1)

    class TimmDataModule(L.LightningDataModule):
        "create_loader's loader as it is: its own (distributed) sampler, resumable state, prefetcher on the rank's device."
        def __init__(self, root, batch_size=4, num_workers=0):
            super().__init__()
            self.root, self.batch_size, self.num_workers = root, batch_size, num_workers

        def train_dataloader(self):
            t = self.trainer
            return create_loader(ImageDataset(self.root), 24, self.batch_size, is_training=True, re_prob=0.5,
                                 num_workers=self.num_workers, distributed=t.world_size > 1,
                                 device=t.strategy.root_device, seed=0)

    return L, Tiny, TimmDataModule


def tiny_root(path):
    "40 small training images in 4 classes: 10 batches of 4 per epoch in one process, 5 per rank over 2."
    from timmdata.tools.sample_data import make_sample_dataset
    return make_sample_dataset(path, n_train=10, n_val=1, classes=['a', 'b', 'c', 'd'], size=(40, 32)) / 'train'


def make_loader(root, device='cpu', distributed=False, index=False, **kw):
    "The loader every framework test trains on: random crops, flips, colour jitter, random erasing; seed fixed (index: targets are sample indices)."
    from timmdata.dataset import ImageDataset
    from timmdata.loader import create_loader
    from _datasets import IndexDataset
    return create_loader((IndexDataset if index else ImageDataset)(str(root)), 24, 4, is_training=True, re_prob=0.5,
                         num_workers=0, seed=0, device=device, distributed=distributed, **kw)


class Progress:
    "Where a training loop is (epoch, batch of the epoch, step): registered for checkpointing beside the loader."
    def __init__(self): self.epoch, self.batch, self.step = 0, 0, 0
    def state_dict(self): return dict(epoch=self.epoch, batch=self.batch, step=self.step)
    def load_state_dict(self, sd): self.epoch, self.batch, self.step = sd['epoch'], sd['batch'], sd['step']


def accelerate_run(root, out, epochs=2, save_at=None, stop_at=None, resume=False, **acc_kw):
    "A plain Accelerate loop: prepare() keeps timmdata's loader; save_state/load_state carry its state. Returns (epoch, digest, indices)."
    from accelerate import Accelerator
    acc = Accelerator(cpu=True, **acc_kw)
    model, loader = torch.nn.Linear(3, 40), make_loader(root, device=acc.device, distributed=acc.num_processes > 1, index=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, prepared = acc.prepare(model, opt, loader)
    assert prepared is loader, type(prepared)  # not a torch DataLoader: Accelerate hands it back as it is
    progress = Progress()
    acc.register_for_checkpointing(loader, progress)
    ckpt = os.path.join(str(out), 'ckpt')
    if resume: acc.load_state(ckpt)
    seen = []
    for epoch in range(progress.epoch, epochs):
        loader.set_epoch(epoch)
        for x, y in loader:
            assert x.device.type == acc.device.type and x.dtype == torch.float32, (x.device, acc.device, x.dtype)  # the prefetcher's normalised batch on the device
            seen.append((epoch, batch_digest(x, y), y.tolist()))
            loss = torch.nn.functional.cross_entropy(model(x.mean((2, 3))), y)
            acc.backward(loss); opt.step(); opt.zero_grad()
            progress.step += 1; progress.batch += 1
            if progress.batch == len(loader): progress.epoch, progress.batch = epoch + 1, 0  # the epoch is over
            if progress.step == save_at: acc.save_state(ckpt)
            if progress.step == stop_at: _dump(seen, out, acc.process_index); return seen
    _dump(seen, out, acc.process_index)
    return seen


def lightning_run(root, out, epochs=2, ckpt_every=None, kill_at=None, ckpt_path=None, **trainer_kw):
    "Fit Tiny for `epochs` over `root`; a ModelCheckpoint every `ckpt_every` steps; os._exit at step `kill_at`. Returns the digests."
    import lightning as L
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
    _, Tiny, TimmDataModule = lightning_pieces()
    out = str(out)

    class Kill(Callback):  # a crash right after step `kill_at`: no clean-up, no further checkpoint
        def on_train_batch_end(self, trainer, module, *a):
            if trainer.global_step == kill_at:
                _dump(module.seen, out, trainer.global_rank); os._exit(0)

    cbs = [ModelCheckpoint(dirpath=os.path.join(out, 'ckpt'), every_n_train_steps=ckpt_every, save_top_k=-1,
                           filename='{step}')] if ckpt_every else []
    if kill_at: cbs.append(Kill())
    trainer = L.Trainer(default_root_dir=out, max_epochs=epochs, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=bool(ckpt_every), callbacks=cbs, **trainer_kw)
    model = Tiny()
    trainer.fit(model, TimmDataModule(str(root)), ckpt_path=ckpt_path)
    _dump(model.seen, out, trainer.global_rank)
    return model.seen


def _dump(seen, out, rank):
    os.makedirs(str(out), exist_ok=True)
    with open(os.path.join(out, f'seen{rank}.json'), 'w') as f: json.dump(seen, f)


def load_seen(out, rank=0) -> list:
    with open(os.path.join(str(out), f'seen{rank}.json')) as f: return [tuple(s[:2]) for s in json.load(f)]


if __name__ == '__main__':  # python tests/_frameworks.py lightning ROOT OUT '{"kill_at": 5, ...}' (Lightning's ddp re-runs this)
    import torch.distributed  # noqa: F401
    if sys.argv[1] == 'lightning':
        lightning_run(sys.argv[2], sys.argv[3], **json.loads(sys.argv[4]))
    elif sys.argv[1] == 'accelerate':
        accelerate_run(sys.argv[2], sys.argv[3], **json.loads(sys.argv[4]))
