"""Issue 6's benchmark: timmdata's create_loader against timm's, torchvision's ImageFolder + DataLoader and the
JPEG-decode limit, alternating in one run. Same as `timmdata bench`; options: `python bench/bench_loaders.py --help`."""
from timmdata.tools.bench import bench_main

if __name__ == '__main__': bench_main()
