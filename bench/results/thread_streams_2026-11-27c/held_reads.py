# An experiment, kept for its result: file reads that never release the GIL (ctypes.PyDLL), patched into timmdata
# before the bench runs. HELD=1 python held_reads.py bench/bench_thread_streams.py --one DATA map thread none --epochs 8
import ctypes, os, sys, runpy
libc = ctypes.PyDLL(None)
libc.open.argtypes = [ctypes.c_char_p, ctypes.c_int]; libc.open.restype = ctypes.c_int
libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]; libc.read.restype = ctypes.c_ssize_t
libc.close.argtypes = [ctypes.c_int]
libc.lseek.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]; libc.lseek.restype = ctypes.c_long
import timmdata.pixels.decode as d
flags = os.O_RDONLY | os.O_CLOEXEC
def held(path):
    fd = libc.open(os.fsencode(path), flags)
    if fd < 0: raise OSError(path)
    try:
        size = libc.lseek(fd, 0, 2); libc.lseek(fd, 0, 0)
        buf = ctypes.create_string_buffer(size)
        n = libc.read(fd, buf, size)
        return buf.raw[:n]
    finally:
        libc.close(fd)
if os.environ.get('HELD') == '1':
    d._read_file = held
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
