"""The device path's floating-point Triton kernels (RandAugment's and AugMix's layers, and the warps), compiled here for an
H100/H200 (sm_90) without a GPU: they build for the GPU as well as run in the interpreter, and the machine code keeps
the arithmetic the pixels are checked with. Every float product and sum rounds on its own (`.rn`: no fused
multiply-add, which the interpreter cannot show and which would move a level here and there), and float-to-integer
conversions truncate (`cvt.rzi`), as torch's operations do. Needs Triton (torch's CUDA wheels bring it)."""

import collections
import re

import pytest

pytestmark = pytest.mark.slow  # a compile each: about 3 s apiece on the 2-core machine (Triton imported in the tests:
# collecting this file costs make test nothing)

SM90 = ('cuda', 90, 32)


def _ptx(kernel, signature: dict, constexprs: dict, fusion: bool = False) -> str:
    "PTX of `kernel` (the module's own, as the loader makes it) compiled for sm_90; contraction off as the loader launches it (`enable_fp_fusion=False`), unless `fusion`."
    triton = pytest.importorskip('triton')
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn=kernel(), signature=signature, constexprs=constexprs)
    try:
        k = triton.compile(src, target=GPUTarget(*SM90), options={'enable_fp_fusion': fusion})
    except (FileNotFoundError, RuntimeError) as e:
        if 'ptxas' in str(e):  # the wheel without its assembler: the PTX cannot be checked past LLVM here
            pytest.skip(f'no ptxas for Triton here: {e}')
        raise
    return k.asm['ptx']


def _float_ops(ptx: str) -> collections.Counter:
    return collections.Counter(re.findall(r'\b(?:mul|add|sub|fma|mad|div)(?:\.[a-z]+)*\.f(?:32|64)\b', ptx))


def _check(ptx: str, width: str, divisions: bool = False):
    "Every float op rounded on its own (`.rn`), none fused; divisions, where the kernel has them (`divisions`), IEEE's (`div.rn`) in doubles only."
    ops = _float_ops(ptx)
    assert ops, 'no float arithmetic found: the pattern no longer matches the PTX'
    loose = {op: n for op, n in ops.items() if '.rn.' not in op}
    assert not loose, f'float operations without round-to-nearest (contractible, or fused): {loose}'
    assert not [op for op in ops if op.startswith(('fma', 'mad'))], ops
    divs = {op for op in ops if op.startswith('div')}
    assert divs <= ({'div.rn.f64'} if divisions else set()), ops
    assert any(op.endswith(width) for op in ops), ops
    to_int = re.findall(r'cvt\.(r[a-z]+)\.[us]\d+\.f(?:32|64)', ptx)
    assert to_int and set(to_int) == {'rzi'}, f'float-to-integer conversions that do not truncate: {set(to_int)}'


CODES = dict(AC=1, EQ=2, CON=8)  # the table ops' codes, as batch_augment numbers them (AUG_OPS)
SIGS = {
    '_stats': {'src': '*u8', 'par': '*fp64', 'at': 'i32', 'hist': '*i64', 'n': 'i32', 'H': 'i32', 'W': 'i32',
               'C': 'constexpr', 'AC': 'constexpr', 'EQ': 'constexpr', 'CON': 'constexpr', 'BLOCK': 'constexpr'},
    '_tables': {'par': '*fp64', 'at': 'i32', 'hist': '*i64', 'luts': '*u8', 'n': 'i32', 'H': 'i32', 'W': 'i32',
                'C': 'constexpr', 'AC': 'constexpr', 'EQ': 'constexpr', 'INV': 'constexpr', 'POST': 'constexpr',
                'SOL': 'constexpr', 'SOLA': 'constexpr', 'BRI': 'constexpr', 'CON': 'constexpr'},
    '_apply': {'src': '*u8', 'dst': '*u8', 'par': '*fp64', 'at': 'i32', 'fill_at': 'i32', 'luts': '*u8', 'n': 'i32', 'H': 'i32',
               'W': 'i32', 'K': 'fp32', 'K5': 'fp32', 'C': 'constexpr', 'BLOCK': 'constexpr'},
    '_mix': {'x': '*u8', 'chains': '*u8', 'par': '*fp64', 'out': '*u8', 'n': 'i32', 'CHW': 'i32', 'WIDTH': 'constexpr',
             'BLOCK': 'constexpr'},
}
CONSTS = {
    '_stats': dict(C=3, BLOCK=256, **CODES),
    '_tables': dict(C=3, INV=3, POST=4, SOL=5, SOLA=6, BRI=7, **CODES),
    '_apply': dict(C=3, BLOCK=256),
    '_mix': dict(WIDTH=3, BLOCK=1024),
}


def _augment_kernel(name: str):
    "The layer kernel `name` as `augment_kernels()` makes it for the loader."
    from timmdata.pixels.augment_kernel import augment_kernels

    return dict(zip(('_stats', '_tables', '_apply', '_mix'), augment_kernels()))[name]


@pytest.mark.parametrize('name', ['_stats', '_tables', '_apply', '_mix'])
def test_augment_kernels_build_for_sm90_with_rounded_float_ops(name):
    ptx = _ptx(lambda: _augment_kernel(name), SIGS[name], CONSTS[name])
    if name == '_stats':  # counts and integer sums only, added atomically
        assert not _float_ops(ptx) and 'atom.global' in ptx, _float_ops(ptx)
    elif name == '_tables':  # autocontrast's scale and contrast's mean divided in doubles, the blends in float32
        _check(ptx, 'f64', divisions=True)
        assert _float_ops(ptx)['div.rn.f64'] > 0 and any(op.endswith('f32') for op in _float_ops(ptx))
    elif name == '_mix':  # AugMix's weighted sum and blends in float32
        _check(ptx, 'f32')
    else:  # the blends in float32, the warps in doubles
        _check(ptx, 'f64')
        assert any(op.endswith('f32') for op in _float_ops(ptx)), _float_ops(ptx)


def test_the_check_sees_fused_multiply_adds():
    "The apply kernel with contraction on: the check refuses it (its products and sums fused, the rest left loose)."
    ptx = _ptx(lambda: _augment_kernel('_apply'), SIGS['_apply'], CONSTS['_apply'], fusion=True)
    assert _float_ops(ptx)['fma.rn.f32'] + _float_ops(ptx)['fma.rn.f64'] > 0, _float_ops(ptx)
    with pytest.raises(AssertionError, match='without round-to-nearest'):
        _check(ptx, 'f64')


@pytest.mark.parametrize('bicubic', [False, True])
def test_warp_kernel_builds_for_sm90_with_rounded_float64_ops(bicubic):
    from timmdata.pixels.warp_kernel import warp_kernel

    sig = {
        'src': '*u8',
        'dst': '*u8',
        'mats': '*fp64',
        'fill': '*u8',
        'H': 'i32',
        'W': 'i32',
        'C': 'constexpr',
        'BICUBIC': 'constexpr',
        'BLOCK': 'constexpr',
    }
    _check(_ptx(warp_kernel, sig, {'C': 3, 'BICUBIC': bicubic, 'BLOCK': 256}), 'f64')
