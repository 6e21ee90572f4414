"""The model alone: the images/s a training step of timm's train.py reaches when the data costs nothing (a batch
already on the device, the same one every step), the ceiling any loader inside train.py is measured against.

The step is train.py's with its defaults and the kit's flags: timm's `create_model` (ResNet-50, 10 classes, as the runs),
channels-last, float16 autocast with a GradScaler (`--amp`: timm's NativeScaler), SGD with Nesterov momentum 0.9, weight
decay 2e-5 and lr 0.1 (`--lr-base 0.1` at batch 256, timm's `create_optimizer_v2`), label smoothing 0.1, and
`loss.item()` each step as train.py does for its log (a wait for the GPU every step). `img_s` is the median of
`--rounds` timed rounds of `--steps` steps after `--warmup` steps (cudnn.benchmark picks its kernels there);
`img_s_nosync` runs the same steps without the per-step `loss.item()` (what a loop that never waits would reach).

    python bench/model_alone.py --out out/model_alone.json                      # on the GPU machine
    python bench/model_alone.py --device cpu --model resnet18 --batch-size 16 --warmup 1 --steps 2 --rounds 1
"""

import argparse, statistics, sys

import torch
from _common import timed_rounds, write_json  # bench/, on the path when run as python bench/model_alone.py


def run(a) -> dict:
    import timm
    from timm.loss import LabelSmoothingCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.utils import NativeScaler

    device = torch.device(a.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        sys.exit('model_alone: --device cuda but CUDA is not available here')
    torch.backends.cudnn.benchmark = True  # as train.py
    model = timm.create_model(a.model, num_classes=a.num_classes).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = create_optimizer_v2(model, 'sgd', lr=a.lr, weight_decay=2e-5, momentum=0.9)
    loss_fn = LabelSmoothingCrossEntropy(smoothing=0.1).to(device)
    amp = a.amp and device.type == 'cuda'
    try:
        scaler = NativeScaler(device=device.type) if amp else None
    except TypeError:  # timm before its NativeScaler took a device: CUDA's
        scaler = NativeScaler()
    g = torch.Generator(device='cpu').manual_seed(0)
    x = torch.randn(a.batch_size, 3, a.size, a.size, generator=g).to(device)
    if a.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, a.num_classes, (a.batch_size,), generator=g).to(device)

    def step(sync: bool):
        with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
            loss = loss_fn(model(x), y)
        opt.zero_grad()
        if scaler is not None:
            scaler(loss, opt, parameters=model.parameters())
        else:
            loss.backward()
            opt.step()
        if sync:
            loss.item()

    def sync_device():
        if device.type == 'cuda':
            torch.cuda.synchronize(device)

    def timed(sync: bool) -> list:
        secs = timed_rounds(lambda: step(sync), a.rounds, a.steps, sync_device)
        return [a.steps * a.batch_size / t for t in secs]

    for _ in range(a.warmup):
        step(True)
    rates, free = timed(True), timed(False)
    res = {
        'model': a.model, 'device': str(device), 'batch_size': a.batch_size, 'amp': amp, 'channels_last': a.channels_last,
        'device_name': torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu',
        'torch': torch.__version__, 'timm': timm.__version__, 'steps': a.steps, 'rounds': a.rounds, 'warmup': a.warmup,
        'img_s': statistics.median(rates), 'img_s_nosync': statistics.median(free), 'rounds_img_s': rates,
        'rounds_img_s_nosync': free,
        'gpu_mem_mb': torch.cuda.max_memory_allocated(device) / 2**20 if device.type == 'cuda' else None,
    }  # fmt: skip
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--device', default='cuda')
    p.add_argument('--model', default='resnet50')
    p.add_argument('--num-classes', type=int, default=10, help="the head's size (the kit's train.py runs use 10)")
    p.add_argument('--batch-size', type=int, default=256)
    p.add_argument('--size', type=int, default=224)
    p.add_argument('--lr', type=float, default=0.1, help="train.py's: lr-base 0.1 x batch 256 / 256")
    p.add_argument('--no-amp', dest='amp', action='store_false', help='float32 (train.py without --amp)')
    p.add_argument('--no-channels-last', dest='channels_last', action='store_false')
    p.add_argument('--warmup', type=int, default=20, help='untimed steps first (cudnn.benchmark tries its kernels)')
    p.add_argument('--steps', type=int, default=30, help='steps per timed round')
    p.add_argument('--rounds', type=int, default=3, help='timed rounds; the median is reported')
    p.add_argument('--out', help='write the results here as JSON')
    a = p.parse_args(argv)
    res = run(a)
    print(
        f"model alone: {res['model']} batch {res['batch_size']} on {res['device_name']}: {res['img_s']:,.0f} img/s "
        f"(loss.item() each step, as train.py), {res['img_s_nosync']:,.0f} img/s without it"
    )
    if a.out:
        write_json(a.out, res)
    return res


if __name__ == '__main__':
    main()
