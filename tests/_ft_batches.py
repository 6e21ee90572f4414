"""The batches that tests/test_freethreaded.py compares across worker modes and across interpreters (a GIL build and a
free-threaded one), as SHA-256 digests of each batch's bytes. Run as a script by the other interpreter:

    python tests/_ft_batches.py ROOT   ->  one JSON line {case: [digest per batch]}

Cases: 'train' (RandAugment, random erasing, a FastCollateMixup collate: mixup and cutmix, label smoothing) and 'eval',
each with thread workers (2), worker processes (2) and in the main process (0); 'resume': the training run with thread
workers cut after 3 batches and resumed from its state by worker processes."""
import hashlib, json, sys, warnings

CASES = {
    'train': dict(is_training=True, auto_augment='rand-m9-mstd0.5-inc1', re_prob=0.5, re_mode='pixel', color_jitter=0.4),
    'eval': dict(is_training=False),
}
MODES = (('thread', 2), ('process', 2), ('process', 0))


def loader(root, case, mode, workers):
    from timmdata import ImageDataset, create_loader, FastCollateMixup
    kw = dict(CASES[case])
    if case == 'train':
        kw['collate_fn'] = FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=10)
    return create_loader(ImageDataset(str(root)), 64, 8, device='cpu', seed=11, num_workers=workers, worker_mode=mode, **kw)


def digest(batch) -> str:
    x, y = batch
    h = hashlib.sha256()
    for t in (x, y):
        t = t.contiguous()
        h.update(f'{t.dtype}{tuple(t.shape)}'.encode()); h.update(t.numpy().tobytes())
    return h.hexdigest()


def run(ld, stop=None, state=None):
    "(digests of the batches, the state after the last one)"
    if state is not None: ld.load_state_dict(json.loads(json.dumps(state)))
    out = []
    for b in ld:
        out.append(digest(b))
        if stop is not None and len(out) == stop: break
    return out, ld.state_dict()


def all_cases(root) -> dict:
    out = {}
    for case in CASES:
        for mode, workers in MODES:
            out[f'{case}/{mode}/{workers}'] = run(loader(root, case, mode, workers))[0]
    head, sd = run(loader(root, 'train', 'thread', 2), stop=3)
    out['resume'] = head + run(loader(root, 'train', 'process', 2), state=sd)[0]
    return out


if __name__ == '__main__':
    warnings.simplefilter('ignore')
    print(json.dumps(all_cases(sys.argv[1])))
