"""The device path's floating-point Triton kernels (RandAugment's colour ops and warps), compiled here for an
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
    "PTX of `kernel` (the module's own, as `colour_kernel()` makes it for the loader) compiled for sm_90; contraction off as the loader launches it (`enable_fp_fusion=False`), unless `fusion`."
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


def _check(ptx: str, width: str):
    ops = _float_ops(ptx)
    assert ops, 'no float arithmetic found: the pattern no longer matches the PTX'
    loose = {op: n for op, n in ops.items() if '.rn.' not in op}
    assert not loose, f'float operations without round-to-nearest (contractible, or fused): {loose}'
    assert not [op for op in ops if op.startswith(('fma', 'mad', 'div'))], ops
    assert any(op.endswith(width) for op in ops), ops
    to_int = re.findall(r'cvt\.(r[a-z]+)\.[us]\d+\.f(?:32|64)', ptx)
    assert to_int and set(to_int) == {'rzi'}, f'float-to-integer conversions that do not truncate: {set(to_int)}'


COLOUR_SIG = {
    'src': '*u8',
    'dst': '*u8',
    'rows': '*i64',
    'factors': '*fp32',
    'luts': '*u8',
    'H': 'i32',
    'W': 'i32',
    'K': 'fp32',
    'K5': 'fp32',
    'C': 'constexpr',
    'KIND': 'constexpr',
    'BLOCK': 'constexpr',
}


@pytest.mark.parametrize('kind', [1, 2, 3])
def test_colour_kernel_builds_for_sm90_with_rounded_float32_ops(kind):
    from timmdata.pixels.batch_augment import colour_kernel

    ptx = _ptx(colour_kernel, COLOUR_SIG, {'C': 3, 'KIND': kind, 'BLOCK': 256})
    if kind == 1:  # the tables: integer loads and stores only
        assert not _float_ops(ptx), _float_ops(ptx)
    else:
        _check(ptx, 'f32')


def test_the_check_sees_fused_multiply_adds():
    "The same kernel with contraction on: the check refuses it (its products and sums fused, the rest left loose)."
    from timmdata.pixels.batch_augment import colour_kernel

    ptx = _ptx(colour_kernel, COLOUR_SIG, {'C': 3, 'KIND': 3, 'BLOCK': 256}, fusion=True)
    assert _float_ops(ptx)['fma.rn.f32'] > 0, _float_ops(ptx)
    with pytest.raises(AssertionError, match='without round-to-nearest'):
        _check(ptx, 'f32')


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
