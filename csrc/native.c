/* timmdata._native: the two hot spots that torch, torchvision and Pillow cannot do in one pass.
 *
 * 1. Decode only the part of a JPEG that a crop needs, with libjpeg-turbo (header, decode_crop).
 *
 * A random-resized crop keeps on average about half of an image. libjpeg-turbo can skip the inverse DCT,
 * upsampling and colour conversion of the rows above the crop (jpeg_skip_scanlines) and of the columns
 * outside it (jpeg_crop_scanline), and stop reading once past the crop's last row. The pixels inside the
 * decoded box are those of a full decode, provided the box has a few pixels of margin around the crop (the
 * chroma upsampling looks at neighbouring samples); the Python side adds that margin.
 * Explained, measured and tested in nbs/06_decode.ipynb.
 *
 * 2. Turn a uint8 NCHW batch into the normalised, colour-jittered float batch in one pass (channel_means,
 * affine_u8): colour jitter and normalisation together are one 3x3 matrix and bias per image, and the torch ops
 * that express it (a float copy, a K=3 matrix product, clamps) take three times as long on the CPU.
 * Explained, measured and tested in nbs/31_prefetch.ipynb. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <jpeglib.h>

/* Portability: MSVC spells C99's `restrict` as `__restrict`. (The GCC-only attributes below are guarded where used.) */
#if defined(_MSC_VER) && !defined(restrict)
#define restrict __restrict
#endif

/* 1 when a buffer holds at least `need` elements of `item` bytes (overflow-safe), else 0 with ValueError set */
static int fits(const Py_buffer *v, Py_ssize_t need, Py_ssize_t item, const char *name) {
    if (need < 0 || (item && need > PY_SSIZE_T_MAX / item) || v->len < need * item) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes, needs %zd elements of %zd bytes", name, v->len, need, item);
        return 0;
    }
    return 1;
}

/* 1 when (n, c, hw) are the sizes of a batch whose element counts n*c*hw and n*c*c fit a Py_ssize_t, else 0 with
 * ValueError set; hw must be at least `min_hw` (1 for a mean: no mean over no pixels) */
static int sizes_ok(const char *name, Py_ssize_t n, Py_ssize_t c, Py_ssize_t hw, Py_ssize_t min_hw) {
    const Py_ssize_t nc = (n > 0 && c > 0 && c <= PY_SSIZE_T_MAX / n) ? n * c : 0;  /* 0: n == 0 or n * c overflows */
    if (n < 0 || c < 1 || hw < min_hw || (n > 0 && nc == 0) || (nc > 0 && (hw > PY_SSIZE_T_MAX / nc || c > PY_SSIZE_T_MAX / nc))) {
        PyErr_Format(PyExc_ValueError, "%s: bad sizes n=%zd c=%zd hw=%zd (need n >= 0, c >= 1, hw >= %zd and products that fit)",
                     name, n, c, hw, min_hw);
        return 0;
    }
    return 1;
}

struct err_mgr { struct jpeg_error_mgr pub; jmp_buf jb; char msg[JMSG_LENGTH_MAX]; char warning[JMSG_LENGTH_MAX]; };

static void on_error(j_common_ptr c) {
    struct err_mgr *e = (struct err_mgr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}
static void on_quiet(j_common_ptr c, int level) { (void)c; (void)level; } /* header(): the decode that follows reports */

/* libjpeg's warnings (level -1: "Corrupt JPEG data: ...", "Premature end of JPEG file"): damaged data that libjpeg
 * decodes anyway. Its default handler prints the first of each image to stderr; here they are counted instead (one per
 * image that warned, with the first message of the latest such image), and the Python side turns the count into one
 * Python warning (jpeg_warnings()). The decode runs without the GIL, so a warning is kept in the call's own error
 * manager, and the process-wide counter and message are updated from it once the call is done (note_warning), under
 * warn_lock: two threads decoding at once never write the same memory. Under the GIL the lock is the GIL itself; on a
 * free-threaded build (Py_GIL_DISABLED, which this module declares it supports: Py_mod_gil) it is a PyMutex. */
static unsigned long long n_warned = 0;
static char last_warning[JMSG_LENGTH_MAX] = "";
#ifdef Py_GIL_DISABLED
static PyMutex warn_lock;  /* zeroed: unlocked */
#define WARN_LOCK() PyMutex_Lock(&warn_lock)
#define WARN_UNLOCK() PyMutex_Unlock(&warn_lock)
#else
#define WARN_LOCK() ((void)0)
#define WARN_UNLOCK() ((void)0)
#endif
static void on_warning(j_common_ptr c, int level) {
    if (level >= 0) return;  /* trace messages */
    if (c->err->num_warnings++ == 0) (*c->err->format_message)(c, ((struct err_mgr *)c->err)->warning);
}
/* holding the call's thread state: count the call's warning, if it had one (under warn_lock) */
static void note_warning(const struct err_mgr *e) {
    if (e->pub.num_warnings == 0) return;
    WARN_LOCK();
    n_warned++; memcpy(last_warning, e->warning, sizeof last_warning);
    WARN_UNLOCK();
}

/* jpeg_warnings() -> (images that warned so far in this process, the latest first warning) */
static PyObject *jpeg_warnings(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    char msg[JMSG_LENGTH_MAX];
    WARN_LOCK();
    const unsigned long long n = n_warned;
    memcpy(msg, last_warning, sizeof msg);
    WARN_UNLOCK();
    msg[sizeof msg - 1] = 0;
    return Py_BuildValue("(Ks)", n, msg);
}

/* A four-channel JPEG (CMYK, or YCCK: Adobe's transform 2, which libjpeg turns into CMYK) as Pillow gives it in RGB:
 * Pillow reads the samples inverted (Adobe's convention, its rawmode "CMYK;I", whatever the file's Adobe marker says),
 * then convert('RGB') makes each channel nk - nk * C / 255 (nk = 255 - K, rounded as its MULDIV255). On libjpeg's own
 * samples c and k that is k - MULDIV255(255 - c, k), always within 0..k. decode.py checks this against the installed
 * Pillow over every (c, k) before it sends a CMYK JPEG here (cmyk_to_rgb below), and keeps it on Pillow's path if not. */
static inline int is_cmyk(const struct jpeg_decompress_struct *c) {
    return c->num_components == 4 && (c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK);
}
static inline uint8_t cmyk_channel(int c, int k) { const int t = (255 - c) * k + 128; return (uint8_t)(k - (((t >> 8) + t) >> 8)); }
static void cmyk_row_to_rgb(const uint8_t *restrict src, uint8_t *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++, src += 4, dst += 3) {
        const int k = src[3];
        dst[0] = cmyk_channel(src[0], k); dst[1] = cmyk_channel(src[1], k); dst[2] = cmyk_channel(src[2], k);
    }
}

/* cmyk_to_rgb(data) -> bytes: the RGB pixels of libjpeg's CMYK samples (len(data) / 4 pixels), as the decoders above
 * make them: decode.py compares them with Pillow's conversion once per process */
static PyObject *cmyk_to_rgb(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    PyObject *r = NULL;
    if (buf.len % 4) PyErr_Format(PyExc_ValueError, "cmyk_to_rgb: %zd bytes is not a whole number of CMYK pixels", buf.len);
    else if ((r = PyBytes_FromStringAndSize(NULL, buf.len / 4 * 3)))
        cmyk_row_to_rgb((const uint8_t *)buf.buf, (uint8_t *)PyBytes_AS_STRING(r), (size_t)(buf.len / 4));
    PyBuffer_Release(&buf);
    return r;
}

/* header(data) -> (height, width, components, colour space code of libjpeg's J_COLOR_SPACE) */
static PyObject *header(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    struct jpeg_decompress_struct cinfo;
    struct err_mgr jerr;
    memset(&cinfo, 0, sizeof cinfo);  /* cinfo.mem == NULL: jpeg_destroy_decompress is safe whatever happened */
    PyObject *volatile r = NULL;
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = on_error; jerr.pub.emit_message = on_quiet;
    if (setjmp(jerr.jb)) { PyErr_Format(PyExc_ValueError, "JPEG header: %s", jerr.msg); goto done; }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)buf.buf, (unsigned long)buf.len);
    jpeg_read_header(&cinfo, TRUE);
    r = Py_BuildValue("(iiii)", (int)cinfo.image_height, (int)cinfo.image_width, (int)cinfo.num_components, (int)cinfo.jpeg_color_space);
done:
    jpeg_destroy_decompress(&cinfo); PyBuffer_Release(&buf);
    return r;
}

/* decode_crop(data, top, left, height, width, max_pixels=0, gray=False) -> (bytearray of rows, x0, y0, w, h)
 * Decodes rows [top, top+height) and the column range libjpeg-turbo can give that covers [left, left+width)
 * (widened to iMCU boundaries); the result is the w x h x C box starting at column x0, row y0, C = 3 (RGB) or 1 (gray:
 * the luma channel). A CMYK or YCCK JPEG comes as RGB, Pillow's conversion (cmyk_row_to_rgb); gray refuses it. An image whose header claims more than max_pixels pixels (> 0) is refused before anything is
 * allocated. Every exit, error or not, goes through `done`: libjpeg's memory, the input buffer and the output are
 * released exactly once (the output survives only inside the returned tuple).
 *
 * The GIL is released for libjpeg's work (header, set-up, every decoded row), so threads decode in parallel. That is
 * safe because: the input stays alive and unmoved for the whole call (the Py_buffer `buf` holds the exporter, and
 * "y*" takes only read-only buffers: bytes, or a read-only view); the output bytearray is new and nobody else holds
 * it until the call returns, so its memory does not move while rows are written into it (it is made while the GIL
 * is held, between the two released stretches); no Python object is touched and no Python error is set while the
 * GIL is released (errors are kept in `code` / libjpeg's message and raised after PyEval_RestoreThread); a libjpeg
 * error longjmps back with the GIL possibly released, and `ts` (volatile: read after the longjmp) says whether to
 * take it back first; warnings go to the call's own error manager (see note_warning). */
enum { DC_OK, DC_PIXELS, DC_BOX, DC_SKIP, DC_STALL };
static PyObject *decode_crop(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int top, left, height, width, gray = 0;
    Py_ssize_t max_pixels = 0;
    if (!PyArg_ParseTuple(args, "y*iiii|np", &buf, &top, &left, &height, &width, &max_pixels, &gray)) return NULL;
    struct jpeg_decompress_struct cinfo;
    struct err_mgr jerr;
    memset(&cinfo, 0, sizeof cinfo);
    memset(&jerr, 0, sizeof jerr);
    PyObject *volatile out = NULL, *volatile ret = NULL;  /* volatile: read after a longjmp */
    PyThreadState *volatile ts = NULL;  /* the released thread state while the GIL is released, else NULL */
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = on_error; jerr.pub.emit_message = on_warning;
    if (setjmp(jerr.jb)) {
        if (ts) { PyEval_RestoreThread(ts); ts = NULL; }
        PyErr_Format(PyExc_ValueError, "JPEG decode: %s", jerr.msg); goto done;
    }
    int code = DC_OK, cmyk = 0;
    long long W = 0, H = 0;
    JDIMENSION x0 = (JDIMENSION)left, cw = (JDIMENSION)width;
    JSAMPARRAY four = NULL;  /* a CMYK JPEG: libjpeg's row of four samples a pixel, converted into the output's three */
    ts = PyEval_SaveThread();  /* first stretch without the GIL: header and decoder set-up */
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)buf.buf, (unsigned long)buf.len);
    jpeg_read_header(&cinfo, TRUE);
    W = (long long)cinfo.image_width; H = (long long)cinfo.image_height;  /* output size at scale 1 */
    if (max_pixels > 0 && W * H > (long long)max_pixels) code = DC_PIXELS;
    /* in 64 bits and without sums that can wrap: any int arguments are checked correctly */
    else if (top < 0 || left < 0 || height < 1 || width < 1 || (long long)top + height > H || (long long)left + width > W) code = DC_BOX;
    else {
        cmyk = !gray && is_cmyk(&cinfo);
        cinfo.out_color_space = gray ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
        jpeg_start_decompress(&cinfo);
        jpeg_crop_scanline(&cinfo, &x0, &cw);
        if (cmyk)  /* libjpeg's pool: freed by jpeg_destroy_decompress, an allocation failure is one of its errors */
            four = (*cinfo.mem->alloc_sarray)((j_common_ptr)&cinfo, JPOOL_IMAGE, cw * 4, 1);
    }
    PyEval_RestoreThread(ts); ts = NULL;
    if (code == DC_PIXELS) {
        PyErr_Format(PyExc_ValueError, "JPEG header claims %lldx%lld = %lld pixels, over the limit of %zd pixels",
                     W, H, W * H, max_pixels);
        goto done;
    }
    if (code == DC_BOX) {
        PyErr_Format(PyExc_ValueError, "crop box (top=%d, left=%d, height=%d, width=%d) is not inside the %lldx%lld image",
                     top, left, height, width, W, H);
        goto done;
    }
    const int C = cmyk ? 3 : cinfo.output_components;
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)height * (Py_ssize_t)cw * C);
    if (!out) goto done;
    unsigned char *dst = (unsigned char *)PyByteArray_AS_STRING(out);
    unsigned stalled_at = 0;
    ts = PyEval_SaveThread();  /* second stretch without the GIL: the rows */
    if (top > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)top) != (JDIMENSION)top) code = DC_SKIP;
    while (code == DC_OK && (long long)cinfo.output_scanline < (long long)top + height) {
        JSAMPROW row = dst + (size_t)(cinfo.output_scanline - (JDIMENSION)top) * cw * C;
        if (jpeg_read_scanlines(&cinfo, four ? four : &row, 1) != 1) { code = DC_STALL; stalled_at = cinfo.output_scanline; }  /* no progress: an error, never a spin */
        else if (four) cmyk_row_to_rgb(four[0], row, cw);
    }
    /* A box that reaches the last row reads the rest of the file too, as a whole decode by PIL or torchvision does: a
     * damaged marker after the image data is an error then. A box above it never reads the rows below: damage there
     * is not seen (nbs/20_dataset.ipynb states the rule; `timmdata check` decodes every file whole). */
    if (code == DC_OK && (long long)top + height == H) jpeg_finish_decompress(&cinfo);
    PyEval_RestoreThread(ts); ts = NULL;
    if (code == DC_SKIP) { PyErr_Format(PyExc_ValueError, "JPEG decode: could not skip to row %d", top); goto done; }
    if (code == DC_STALL) {
        PyErr_Format(PyExc_ValueError, "JPEG decode: libjpeg made no progress at row %u", stalled_at); goto done;
    }
    ret = Py_BuildValue("(Oiiii)", out, (int)x0, top, (int)cw, height);
done:
    note_warning(&jerr);
    jpeg_destroy_decompress(&cinfo);  /* also aborts a decompression in progress */
    PyBuffer_Release(&buf); Py_XDECREF(out);
    return ret;
}


/* 3. Pillow's resampling (the algorithm of its Resample.c: two separable passes, weights in 22-bit fixed point, a uint8
 * intermediate) for a window of the output only: rows top..top+oh and columns left..left+ow of the image resized to
 * out_h x out_w, from the source rows and columns that window needs. Each output pixel depends only on its own
 * weights and on the intermediate values in its column, so the window equals that window of a whole resize bit for
 * bit: the eval pipeline (resize the shorter side, centre crop) decodes and resizes only what its crop keeps.
 * Tested against PIL in nbs/10_transforms.ipynb. */
#include <math.h>
#include <stdlib.h>
#define RS_BITS 22  /* Pillow's PRECISION_BITS: 32 - 8 - 2 */

static double rs_filter(int kind, double x) {
    if (x < 0.0) x = -x;
    if (kind == 0) return x < 1.0 ? 1.0 - x : 0.0;  /* bilinear: a triangle */
    const double a = -0.5;  /* bicubic, Pillow's a */
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* Weights of output pixels first..first+n-1 of a resize from in_size to out_size: bounds[2i] the first source pixel,
 * bounds[2i+1] how many; fixed-point weights, ksize per pixel. Returns ksize, or 0 when memory ran out. */
static int rs_coeffs(int kind, int in_size, int out_size, int first, int n, int *bounds, int32_t **kk_out) {
    const double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = (kind == 0 ? 1.0 : 2.0) * filterscale, ss = 1.0 / filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    double *w = malloc(sizeof(double) * (size_t)ksize);
    int32_t *kk = malloc(sizeof(int32_t) * (size_t)ksize * (size_t)n);
    if (!w || !kk) { free(w); free(kk); return 0; }
    for (int i = 0; i < n; i++) {
        const double center = (first + i + 0.5) * scale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) { w[x] = rs_filter(kind, (x + xmin - center + 0.5) * ss); ww += w[x]; }
        int32_t *k = kk + (size_t)i * ksize;
        for (int x = 0; x < ksize; x++) {
            const double v = x < xmax ? (ww != 0.0 ? w[x] / ww : w[x]) : 0.0;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << RS_BITS)) : (int32_t)(0.5 + v * (1 << RS_BITS));
        }
        bounds[2 * i] = xmin; bounds[2 * i + 1] = xmax;
    }
    free(w); *kk_out = kk; return ksize;
}

static inline uint8_t rs_clip8(int32_t v) { v >>= RS_BITS; return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v; }


/* Per-thread scratch for the decoded window and the passes' intermediate: a fresh malloc of a few hundred KB per image
 * is served by mmap and returned with munmap (glibc's threshold is 128 KB to start), so every image paid about 70 page
 * faults (about 60 us) for memory it had just given back. Each thread keeps its two buffers for its next call (freed
 * when the thread ends); a request over RS_KEEP bytes (a huge image) is allocated and freed per call, so what is kept
 * stays bounded whatever the images' headers claim. Without POSIX threads, every buffer is per call. */
#define RS_KEEP ((size_t)8 << 20)
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define RS_KEEPS 1
typedef struct { uint8_t *p[2]; size_t n[2]; } rs_scratch;
static pthread_key_t rs_key;
static int rs_key_made = 0;  /* set in the module's init (PyInit__native, under the import lock) */
static void rs_scratch_free(void *v) { rs_scratch *s = v; free(s->p[0]); free(s->p[1]); free(s); }
static void rs_scratch_init(void) { if (!rs_key_made && pthread_key_create(&rs_key, rs_scratch_free) == 0) rs_key_made = 1; }
#else
#define RS_KEEPS 0
static void rs_scratch_init(void) {}
#endif

/* n bytes for buffer `slot` (0: the window, 1: the intermediate) of this thread; NULL when memory ran out. Give it back
 * with rs_give. */
static uint8_t *rs_take(int slot, size_t n) {
#if RS_KEEPS
    if (rs_key_made && n <= RS_KEEP) {
        rs_scratch *s = pthread_getspecific(rs_key);
        if (!s) {
            if (!(s = calloc(1, sizeof *s))) return NULL;
            if (pthread_setspecific(rs_key, s) != 0) { free(s); return NULL; }
        }
        if (s->n[slot] < n) {
            free(s->p[slot]);
            s->p[slot] = malloc(n);
            s->n[slot] = s->p[slot] ? n : 0;
        }
        return s->p[slot];
    }
#endif
    (void)slot;
    return malloc(n);
}

static void rs_give(uint8_t *p, size_t n) {
#if RS_KEEPS
    if (rs_key_made && n <= RS_KEEP) return;  /* kept for the thread's next call */
#endif
    (void)n;
    free(p);
}

/* The two passes below, in plain C (any compiler, any CPU) and with AVX2 (x86-64 GCC or clang, chosen at run time):
 * the same integer operations in both, so the same bytes. A pass reads rows of `src` (`ss` bytes apart) and writes
 * rows of `dst` (`ds` bytes apart); `bounds` count from the source's first row / column. The horizontal pass writes
 * its channels as planes (`plane` bytes apart): the vertical pass then reads contiguous bytes of one channel, and the
 * result is a planar CHW image, which the batch takes with a plain copy. */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define RS_AVX2 1
#define RS_TARGET __attribute__((target("avx2")))
#else
#define RS_AVX2 0
#endif

/* The horizontal pass for output pixels i0..i1 of rows 0..n-1 (C interleaved channels in, planes out) */
static void rs_horizontal_c(const uint8_t *src, Py_ssize_t ss, int n, int C, int i0, int i1, const int *b, const int32_t *kk,
                            int ks, uint8_t *dst, Py_ssize_t ds, Py_ssize_t plane) {
    for (int y = 0; y < n; y++) {
        const uint8_t *row = src + (size_t)y * ss;
        uint8_t *t = dst + (size_t)y * ds;
        for (int i = i0; i < i1; i++) {
            const uint8_t *p = row + (size_t)b[2 * i] * C;
            const int32_t *k = kk + (size_t)i * ks;
            for (int c = 0; c < C; c++) {
                int32_t a = 1 << (RS_BITS - 1);
                for (int x = 0; x < b[2 * i + 1]; x++) a += p[x * C + c] * k[x];
                t[c * plane + i] = rs_clip8(a);
            }
        }
    }
}

/* The vertical pass: output row j from rows bounds[2j].. of src, the first m bytes of each. */
static void rs_vertical_c(const uint8_t *src, Py_ssize_t ss, Py_ssize_t m, int oh, const int *b, const int32_t *kk, int ks,
                          uint8_t *dst, Py_ssize_t ds) {
    for (int j = 0; j < oh; j++) {
        const uint8_t *r = src + (size_t)b[2 * j] * ss;
        const int32_t *k = kk + (size_t)j * ks;
        uint8_t *o = dst + (size_t)j * ds;
        for (Py_ssize_t q = 0; q < m; q++) {
            int32_t a = 1 << (RS_BITS - 1);
            for (int y = 0; y < b[2 * j + 1]; y++) a += r[(size_t)y * ss + q] * k[y];
            o[q] = rs_clip8(a);
        }
    }
}

#if RS_AVX2
/* The passes with AVX2, exact to the plain C ones: 16-bit multiply-adds (two taps per instruction) need 16-bit weights,
 * so each 22-bit weight k is split as k = kh * 2^11 + kl (kh signed, 0 <= kl < 2^11, both fit 16 bits) and the two
 * sums are put together as (sum p * kh) * 2^11 + sum p * kl: the same integer as sum p * k, never out of 32 bits.
 * The horizontal pass takes 8 output pixels of one channel at a time, 4 per 128-bit lane; a lane whose 4 pixels' taps
 * all lie within 16 source pixels (every lane at scales up to 3 for bilinear and 2.1 for bicubic) loads those 16 bytes
 * of the channel's plane, and per pair of taps a byte shuffle puts each pixel's two source bytes side by side as
 * 16-bit values (0 where a pixel has fewer taps). The plan per group: each lane's first source pixel, the number of tap
 * pairs, and per pair the shuffle (32 bytes) and the high and low weights (16 x int16 each). Groups that do not fit
 * (and the last ow % 8 pixels) go through the plain C loop. Rows go two at a time (each shuffle and weight vector
 * loaded once for both), each first split into its three planes, 16 pixels a step. */
typedef struct { int first0, first1, pairs; } rs_group;

#define RS_KSPLIT 11
static inline int16_t rs_khi(int32_t k) { return (int16_t)(k >> RS_KSPLIT); }
static inline int16_t rs_klo(int32_t k) { return (int16_t)(k & ((1 << RS_KSPLIT) - 1)); }

static RS_TARGET void rs_split3(const uint8_t *p, int w, uint8_t *r, uint8_t *g, uint8_t *bl) {
    const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i rb = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
    const __m128i rc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
    const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i gb = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
    const __m128i gc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
    const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i bb = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
    const __m128i bc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
    int x = 0;
    for (; x + 16 <= w; x += 16) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(p + 3 * x)), b = _mm_loadu_si128((const __m128i *)(p + 3 * x + 16)),
                      c = _mm_loadu_si128((const __m128i *)(p + 3 * x + 32));
        _mm_storeu_si128((__m128i *)(r + x), _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(b, rb)), _mm_shuffle_epi8(c, rc)));
        _mm_storeu_si128((__m128i *)(g + x), _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(b, gb)), _mm_shuffle_epi8(c, gc)));
        _mm_storeu_si128((__m128i *)(bl + x), _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(b, bb)), _mm_shuffle_epi8(c, bc)));
    }
    for (; x < w; x++) { r[x] = p[3 * x]; g[x] = p[3 * x + 1]; bl[x] = p[3 * x + 2]; }
}

/* (high sums) * 2^11 + (low sums), rounded and shifted: the 8 output bytes of a group, in order */
static inline RS_TARGET __m128i rs_finish8(__m256i hi, __m256i lo) {
    const __m256i half = _mm256_set1_epi32(1 << (RS_BITS - 1));
    const __m256i a = _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, RS_KSPLIT), lo), half), RS_BITS);
    const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    return _mm_packus_epi16(p16, p16);
}

static RS_TARGET void rs_horizontal3_avx2(const uint8_t *src, Py_ssize_t ss, int n, int w, int ow, const int *b, const int32_t *kk,
                                          int ks, const rs_group *gr, const uint8_t *masks, const int16_t *wts, int maxpairs,
                                          uint8_t *planes, uint8_t *dst, Py_ssize_t ds, Py_ssize_t plane) {
    const Py_ssize_t pw = (Py_ssize_t)w + 16;  /* a plane row, with room for a lane's 16-byte load */
    const int ng = ow / 8;
    for (int y = 0; y < n; y += 2) {  /* two rows at a time: each shuffle and weight vector loaded once for both */
        const int two = y + 1 < n;
        const uint8_t *row = src + (size_t)y * ss;
        uint8_t *t = dst + (size_t)y * ds;
        rs_split3(row, w, planes, planes + pw, planes + 2 * pw);
        if (two) rs_split3(row + ss, w, planes + 3 * pw, planes + 4 * pw, planes + 5 * pw);
        for (int c = 0; c < 3; c++) {
            const uint8_t *pc = planes + c * pw, *pc1 = pc + 3 * pw;
            uint8_t *tc = t + c * plane;
            for (int g = 0; g < ng; g++) {
                if (gr[g].pairs < 0) continue;  /* done by the plain loop below */
                const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(pc + gr[g].first0))),
                                                          _mm_loadu_si128((const __m128i *)(pc + gr[g].first1)), 1);
                const __m256i v1 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(pc1 + gr[g].first0))),
                                                           _mm_loadu_si128((const __m128i *)(pc1 + gr[g].first1)), 1);  /* row y + 1 (unused on a last odd row) */
                const uint8_t *m = masks + (size_t)g * maxpairs * 32;
                const int16_t *k = wts + (size_t)g * maxpairs * 32;
                __m256i h = _mm256_setzero_si256(), l = h, h1 = h, l1 = h;
                for (int j = 0; j < gr[g].pairs; j++) {
                    const __m256i mj = _mm256_loadu_si256((const __m256i *)(m + 32 * j));
                    const __m256i kh = _mm256_loadu_si256((const __m256i *)(k + 32 * j)), kl = _mm256_loadu_si256((const __m256i *)(k + 32 * j + 16));
                    const __m256i s = _mm256_shuffle_epi8(v, mj), s1 = _mm256_shuffle_epi8(v1, mj);
                    h = _mm256_add_epi32(h, _mm256_madd_epi16(s, kh)); l = _mm256_add_epi32(l, _mm256_madd_epi16(s, kl));
                    h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(s1, kh)); l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(s1, kl));
                }
                _mm_storel_epi64((__m128i *)(tc + 8 * g), rs_finish8(h, l));
                if (two) _mm_storel_epi64((__m128i *)(tc + ds + 8 * g), rs_finish8(h1, l1));
            }
        }
        for (int r = 0; r <= two; r++) {
            for (int g = 0; g < ng; g++)
                if (gr[g].pairs < 0) rs_horizontal_c(row + r * ss, ss, 1, 3, 8 * g, 8 * g + 8, b, kk, ks, t + r * ds, ds, plane);
            if (8 * ng < ow) rs_horizontal_c(row + r * ss, ss, 1, 3, 8 * ng, ow, b, kk, ks, t + r * ds, ds, plane);
        }
    }
}

/* 16 bytes of a row at a time: two source rows' bytes interleaved as 16-bit pairs, times the pair of their weights */
static RS_TARGET void rs_vertical_avx2(const uint8_t *src, Py_ssize_t ss, Py_ssize_t m, int oh, const int *b, const int32_t *kk,
                                       int ks, uint8_t *dst, Py_ssize_t ds) {
    const __m256i half = _mm256_set1_epi32(1 << (RS_BITS - 1)), zero = _mm256_setzero_si256();
    for (int j = 0; j < oh; j++) {
        const uint8_t *r = src + (size_t)b[2 * j] * ss;
        const int32_t *k = kk + (size_t)j * ks;
        const int n = b[2 * j + 1];
        uint8_t *o = dst + (size_t)j * ds;
        __m256i wh[32], wl[32];  /* per pair of taps: (kh_y, kh_y+1) and (kl_y, kl_y+1) in every 32-bit lane */
        const int np = (n + 1) / 2;
        if (np > 32) { rs_vertical_c(src, ss, m, 1, b + 2 * j, k, ks, o, ds); continue; }  /* over 64 taps: a downscale of 16x and more */
        for (int y = 0; y < np; y++) {
            const int32_t k0 = k[2 * y], k1 = 2 * y + 1 < n ? k[2 * y + 1] : 0;
            wh[y] = _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)rs_khi(k0) | ((uint32_t)(uint16_t)rs_khi(k1) << 16)));
            wl[y] = _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)rs_klo(k0) | ((uint32_t)(uint16_t)rs_klo(k1) << 16)));
        }
        Py_ssize_t q = 0;
        for (; q + 16 <= m; q += 16) {
            __m256i h0 = zero, h1 = zero, l0 = zero, l1 = zero;
            for (int y = 0; y < np; y++) {
                const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(r + (size_t)(2 * y) * ss + q)));
                const __m256i c = 2 * y + 1 < n ? _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(r + (size_t)(2 * y + 1) * ss + q))) : zero;
                const __m256i lo = _mm256_unpacklo_epi16(a, c), hi = _mm256_unpackhi_epi16(a, c);
                h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(lo, wh[y])); h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(hi, wh[y]));
                l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(lo, wl[y])); l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(hi, wl[y]));
            }
            const __m256i a0 = _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h0, RS_KSPLIT), l0), half), RS_BITS);
            const __m256i a1 = _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h1, RS_KSPLIT), l1), half), RS_BITS);
            const __m256i p16 = _mm256_packs_epi32(a0, a1);  /* the unpacks' order undone: 16 int16 in order */
            _mm_storeu_si128((__m128i *)(o + q), _mm_packus_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1)));
        }
        if (q < m) {
            const int bj[2] = {0, n};
            rs_vertical_c(r + q, ss, m - q, 1, bj, k, ks, o + q, ds);
        }
    }
}

static int rs_cpu_avx2 = 0;  /* set once when the module is imported (rs_detect_cpu), read-only after */
static void rs_detect_cpu(void) { __builtin_cpu_init(); rs_cpu_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0; }
#endif
static int rs_simd = 1;  /* set_resample_simd(False): the plain C passes, for tests that compare both */

/* 1 when the AVX2 passes run: the CPU has AVX2 and they are not switched off */
static int rs_avx2(void) {
#if RS_AVX2
    return rs_cpu_avx2 && __atomic_load_n(&rs_simd, __ATOMIC_RELAXED);
#else
    return 0;
#endif
}

/* set_resample_simd(on) -> whether the AVX2 passes were on before (never on where the CPU or the build has none) */
static PyObject *set_resample_simd(PyObject *self, PyObject *args) {
    int on; if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    const int was = rs_avx2();
#if defined(__GNUC__)
    __atomic_store_n(&rs_simd, on, __ATOMIC_RELAXED);
#else
    rs_simd = on;
#endif
    return PyBool_FromLong(was);
}

/* the horizontal pass over source rows `w` pixels wide, AVX2 where it can; 0 when memory ran out */
static int rs_horizontal(const uint8_t *src, Py_ssize_t ss, int n, int C, int w, int ow, const int *b, const int32_t *kk, int ks,
                         uint8_t *dst, Py_ssize_t ds, Py_ssize_t plane, int simd) {
#if RS_AVX2
    if (C == 3 && simd && ow >= 8) {
        const int ng = ow / 8;
        int maxtaps = 0;
        for (int i = 0; i < 8 * ng; i++) maxtaps = b[2 * i + 1] > maxtaps ? b[2 * i + 1] : maxtaps;
        const int maxpairs = (maxtaps + 1) / 2;
        rs_group *gr = malloc(sizeof(rs_group) * (size_t)ng);
        uint8_t *masks = calloc((size_t)ng * maxpairs, 32), *planes = malloc(6 * ((size_t)w + 16));  /* two rows' planes */
        int16_t *wts = calloc((size_t)ng * maxpairs * 32, sizeof(int16_t));
        if (!gr || !masks || !planes || !wts) { free(gr); free(masks); free(planes); free(wts); return 0; }
        for (int g = 0; g < ng; g++) {
            int first[2], taps = 0, fits = 1;
            for (int L = 0; L < 2; L++) {
                int lo = b[2 * (8 * g + 4 * L)], hi = 0;
                for (int i = 8 * g + 4 * L; i < 8 * g + 4 * L + 4; i++) {
                    lo = b[2 * i] < lo ? b[2 * i] : lo;
                    hi = b[2 * i] + b[2 * i + 1] > hi ? b[2 * i] + b[2 * i + 1] : hi;
                    taps = b[2 * i + 1] > taps ? b[2 * i + 1] : taps;
                }
                if (hi - lo > 16) fits = 0;
                first[L] = lo;
            }
            gr[g].first0 = first[0]; gr[g].first1 = first[1]; gr[g].pairs = fits ? (taps + 1) / 2 : -1;
            if (!fits) continue;
            for (int j = 0; j < gr[g].pairs; j++) {
                uint8_t *mj = masks + ((size_t)g * maxpairs + j) * 32;
                int16_t *kh = wts + ((size_t)g * maxpairs + j) * 32, *kl = kh + 16;
                for (int L = 0; L < 2; L++)
                    for (int i = 0; i < 4; i++)
                        for (int e = 0; e < 2; e++) {
                            const int o = 8 * g + 4 * L + i, tap = 2 * j + e, has = tap < b[2 * o + 1], at = 16 * L + 4 * i + 2 * e;
                            mj[at] = has ? (uint8_t)(b[2 * o] + tap - first[L]) : 0x80;
                            mj[at + 1] = 0x80;  /* the high byte of the 16-bit value */
                            const int32_t k = has ? kk[(size_t)o * ks + tap] : 0;
                            kh[8 * L + 2 * i + e] = rs_khi(k); kl[8 * L + 2 * i + e] = rs_klo(k);
                        }
            }
        }
        memset(planes, 0, 6 * ((size_t)w + 16));  /* the bytes past a row's end are loaded, never used: defined anyway */
        rs_horizontal3_avx2(src, ss, n, w, ow, b, kk, ks, gr, masks, wts, maxpairs, planes, dst, ds, plane);
        free(gr); free(masks); free(planes); free(wts);
        return 1;
    }
#endif
    (void)w; (void)simd;
    rs_horizontal_c(src, ss, n, C, 0, ow, b, kk, ks, dst, ds, plane);
    return 1;
}

static void rs_vertical(const uint8_t *src, Py_ssize_t ss, Py_ssize_t m, int oh, const int *b, const int32_t *kk, int ks,
                        uint8_t *dst, Py_ssize_t ds, int simd) {
#if RS_AVX2
    if (simd) { rs_vertical_avx2(src, ss, m, oh, b, kk, ks, dst, ds); return; }
#endif
    (void)simd;
    rs_vertical_c(src, ss, m, oh, b, kk, ks, dst, ds);
}

/* A window's plan: the weights of its output columns and rows, the source rows yf..yl and columns xf..xl they read,
 * bounds relative to yf / xf. Returns 1, or 0 with a Python error set (under the GIL). */
typedef struct { int *bh, *bv; int32_t *kh, *kv; int ksh, ksv, yf, yl, xf, xl; } rs_plan;

static void rs_plan_free(rs_plan *p) { free(p->bh); free(p->bv); free(p->kh); free(p->kv); memset(p, 0, sizeof *p); }

/* rs_plan_make's work without the GIL: 0 made, RS_BAD_WINDOW (nothing allocated) or RS_NO_MEMORY */
enum { RS_MADE, RS_BAD_WINDOW, RS_NO_MEMORY };
static int rs_plan_build(rs_plan *p, int in_h, int in_w, int out_h, int out_w, int top, int left, int oh, int ow, int kind) {
    memset(p, 0, sizeof *p);
    if ((kind != 0 && kind != 1) || in_h < 1 || in_w < 1 || out_h < 1 || out_w < 1 || oh < 1 || ow < 1 || top < 0 || left < 0
        || (long long)top + oh > out_h || (long long)left + ow > out_w)
        return RS_BAD_WINDOW;
    p->bh = malloc(sizeof(int) * 2 * (size_t)ow); p->bv = malloc(sizeof(int) * 2 * (size_t)oh);
    if (!p->bh || !p->bv || !(p->ksh = rs_coeffs(kind, in_w, out_w, left, ow, p->bh, &p->kh))
        || !(p->ksv = rs_coeffs(kind, in_h, out_h, top, oh, p->bv, &p->kv))) {
        rs_plan_free(p); return RS_NO_MEMORY;
    }
    p->yf = p->bv[0]; p->yl = p->bv[2 * (oh - 1)] + p->bv[2 * (oh - 1) + 1];
    p->xf = p->bh[0]; p->xl = p->bh[2 * (ow - 1)] + p->bh[2 * (ow - 1) + 1];
    for (int i = 0; i < ow; i++) p->bh[2 * i] -= p->xf;
    for (int j = 0; j < oh; j++) p->bv[2 * j] -= p->yf;
    return RS_MADE;
}
#define RS_BAD_WINDOW_FMT "%s: bad window (output %dx%d at (%d, %d) of %dx%d from %dx%d, kind %d)"

static int rs_plan_make(rs_plan *p, const char *name, int in_h, int in_w, int out_h, int out_w, int top, int left, int oh, int ow,
                        int kind) {
    const int r = rs_plan_build(p, in_h, in_w, out_h, out_w, top, left, oh, ow, kind);
    if (r == RS_BAD_WINDOW) PyErr_Format(PyExc_ValueError, RS_BAD_WINDOW_FMT, name, oh, ow, top, left, out_h, out_w, in_h, in_w, kind);
    else if (r == RS_NO_MEMORY) PyErr_NoMemory();
    return r == RS_MADE;
}

static void rs_plan_mirror(rs_plan *p, int ow) {  /* output column i takes column ow-1-i's bounds and weights */
    for (int i = 0, j = ow - 1; i < j; i++, j--) {
        int t0 = p->bh[2 * i], t1 = p->bh[2 * i + 1];
        p->bh[2 * i] = p->bh[2 * j]; p->bh[2 * i + 1] = p->bh[2 * j + 1]; p->bh[2 * j] = t0; p->bh[2 * j + 1] = t1;
        int32_t *a = p->kh + (size_t)i * p->ksh, *b = p->kh + (size_t)j * p->ksh;
        for (int k = 0; k < p->ksh; k++) { int32_t t = a[k]; a[k] = b[k]; b[k] = t; }
    }
}

/* Both passes, in Pillow's order, from the window's first source byte (rows `rs` bytes apart) into dst (C planes of
 * oh x ow). Needs no GIL. Returns 0 when memory ran out. */
static int rs_passes(const rs_plan *p, const uint8_t *first, Py_ssize_t rs, int C, int oh, int ow, int vfirst, int simd, uint8_t *dst) {
    /* the intermediate: horizontal first, (yl - yf) rows of ow pixels as C planes; vertical first, oh interleaved rows
     * of the window's source columns */
    const Py_ssize_t tw = vfirst ? (Py_ssize_t)(p->xl - p->xf) * C : (Py_ssize_t)ow, th = vfirst ? oh : p->yl - p->yf;
    const size_t tn = (size_t)th * (size_t)tw * (vfirst ? 1 : (size_t)C) + 16;
    uint8_t *tmp = rs_take(1, tn);
    if (!tmp) return 0;
    int ok = 1;
    if (vfirst) {
        rs_vertical(first, rs, tw, oh, p->bv, p->kv, p->ksv, tmp, tw, simd);
        ok = rs_horizontal(tmp, tw, oh, C, p->xl - p->xf, ow, p->bh, p->kh, p->ksh, dst, ow, (Py_ssize_t)oh * ow, simd);
    } else {
        ok = rs_horizontal(first, rs, p->yl - p->yf, C, p->xl - p->xf, ow, p->bh, p->kh, p->ksh, tmp, ow, th * tw, simd);
        for (Py_ssize_t c = 0; ok && c < C; c++)
            rs_vertical(tmp + c * th * tw, tw, ow, oh, p->bv, p->kv, p->ksv, dst + c * (Py_ssize_t)oh * ow, ow, simd);
    }
    rs_give(tmp, tn);
    return ok;
}

/* resample_window(src, y0, x0, in_h, in_w, out_h, out_w, top, left, oh, ow, kind, vertical_first=False): see the
 * method table. Pillow up to 12 always runs the horizontal pass first; Pillow 13 runs the vertical one first when the
 * height shrinks by more than twice as many pixels as the width: the caller says which (the intermediate is rounded
 * to uint8, so the order shows in the last bit). The GIL is released for both passes: src stays exported (held by
 * the Py_buffer) and the output bytearray is new, so nobody else reads or moves them meanwhile. */
static PyObject *resample_window(PyObject *self, PyObject *args) {
    PyObject *src;
    int y0, x0, in_h, in_w, out_h, out_w, top, left, oh, ow, kind, vfirst = 0, flip = 0;
    if (!PyArg_ParseTuple(args, "Oiiiiiiiiiii|pp", &src, &y0, &x0, &in_h, &in_w, &out_h, &out_w, &top, &left, &oh, &ow, &kind, &vfirst, &flip))
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(src, &v, PyBUF_STRIDES) < 0) return NULL;
    PyObject *out = NULL;
    rs_plan p; memset(&p, 0, sizeof p);
    if (v.ndim != 3 || v.itemsize != 1 || (v.shape[2] != 1 && v.shape[2] != 3) || v.strides[2] != 1 || v.strides[1] != v.shape[2]
        || v.strides[0] < v.shape[1] * v.shape[2]) {
        PyErr_SetString(PyExc_ValueError, "resample_window: src must be uint8 HWC (C = 1 or 3) with packed pixels in each row");
        goto done;
    }
    const Py_ssize_t sh = v.shape[0], sw = v.shape[1], C = v.shape[2], rs = v.strides[0];
    if (y0 < 0 || x0 < 0 || (long long)y0 + sh > in_h || (long long)x0 + sw > in_w) {
        PyErr_Format(PyExc_ValueError, "resample_window: bad source (%zdx%zd at (%d, %d) of %dx%d)", sh, sw, y0, x0, in_h, in_w);
        goto done;
    }
    if (!rs_plan_make(&p, "resample_window", in_h, in_w, out_h, out_w, top, left, oh, ow, kind)) goto done;
    if (flip) rs_plan_mirror(&p, ow);
    if (p.yf < y0 || p.yl > y0 + sh || p.xf < x0 || p.xl > x0 + sw) {
        PyErr_Format(PyExc_ValueError, "resample_window: the window needs source rows %d..%d and columns %d..%d; got rows %d..%zd, "
                     "columns %d..%zd", p.yf, p.yl, p.xf, p.xl, y0, y0 + sh, x0, x0 + sw);
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)oh * ow * C);
    if (!out) goto done;
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out);
    const uint8_t *first = (const uint8_t *)v.buf + (size_t)(p.yf - y0) * rs + (size_t)(p.xf - x0) * C;
    int ok;
    const int simd = rs_avx2();
    Py_BEGIN_ALLOW_THREADS
    ok = rs_passes(&p, first, rs, (int)C, oh, ow, vfirst, simd, dst);
    Py_END_ALLOW_THREADS
    if (!ok) { Py_CLEAR(out); PyErr_NoMemory(); }
done:
    rs_plan_free(&p);
    PyBuffer_Release(&v);
    return out;
}

/* resize_batch(items, oh, ow, out) -> None: for each item (src, kind, vertical_first, flip) in order, the whole of src
 * (uint8 HWC, 3 channels, packed pixels in each row: a training crop's box of a store's image) resized to oh x ow
 * (resample_window's passes, mirrored with flip) and written planar into image i of out, a writable buffer of
 * len(items) * 3 * oh * ow bytes (the batch's uint8 NCHW memory). One call per batch: a batch's Python per sample is
 * a tuple, and the pixels go straight to where the batch lives (no image-sized buffer per sample, no copy into the
 * batch). The sources are held by their Py_buffers; the GIL is released for all of them. */
static PyObject *resize_batch(PyObject *self, PyObject *args) {
    PyObject *items; int oh, ow; Py_buffer out;
    if (!PyArg_ParseTuple(args, "Oiiw*", &items, &oh, &ow, &out)) return NULL;
    PyObject *seq = PySequence_Fast(items, "resize_batch: items must be a sequence of (src, kind, vertical_first, flip)");
    if (!seq) { PyBuffer_Release(&out); return NULL; }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *v = n ? calloc((size_t)n, sizeof *v) : NULL;
    rs_plan *pl = n ? calloc((size_t)n, sizeof *pl) : NULL;
    int *vf = n ? calloc((size_t)n, sizeof(int)) : NULL;
    Py_ssize_t got = 0;
    PyObject *ret = NULL;
    if (n && (!v || !pl || !vf)) { PyErr_NoMemory(); goto done; }
    if (oh < 1 || ow < 1 || out.len < n * 3 * (Py_ssize_t)oh * ow) {
        PyErr_Format(PyExc_ValueError, "resize_batch: out holds %zd bytes; %zd images of 3x%dx%d need %zd", out.len, n, oh, ow,
                     n * 3 * (Py_ssize_t)oh * ow);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++, got++) {
        PyObject *src; int kind, vfirst, flip;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "Oipp;resize_batch: an item is (src, kind, vertical_first, flip)",
                              &src, &kind, &vfirst, &flip)
            || PyObject_GetBuffer(src, &v[i], PyBUF_STRIDES) < 0) goto done;
        if (v[i].ndim != 3 || v[i].itemsize != 1 || v[i].shape[2] != 3 || v[i].strides[2] != 1 || v[i].strides[1] != 3
            || v[i].strides[0] < v[i].shape[1] * 3 || v[i].shape[0] < 1 || v[i].shape[1] < 1) {
            PyBuffer_Release(&v[i]);
            PyErr_Format(PyExc_ValueError, "resize_batch: item %zd's src must be uint8 HWC with 3 channels and packed pixels in each row", i);
            goto done;
        }
        if (v[i].shape[0] > INT_MAX || v[i].shape[1] > INT_MAX
            || !rs_plan_make(&pl[i], "resize_batch", (int)v[i].shape[0], (int)v[i].shape[1], oh, ow, 0, 0, oh, ow, kind)) {
            PyBuffer_Release(&v[i]);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "resize_batch: item %zd's src is too large", i);
            goto done;
        }
        if (flip) rs_plan_mirror(&pl[i], ow);
        vf[i] = vfirst;
    }
    int ok = 1;
    const int simd = rs_avx2();
    const Py_ssize_t img = 3 * (Py_ssize_t)oh * ow;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = rs_passes(&pl[i], (const uint8_t *)v[i].buf, v[i].strides[0], 3, oh, ow, vf[i], simd, (uint8_t *)out.buf + i * img);
    Py_END_ALLOW_THREADS
    if (!ok) { PyErr_NoMemory(); goto done; }
    ret = Py_None; Py_INCREF(ret);
done:
    for (Py_ssize_t i = 0; i < got; i++) { PyBuffer_Release(&v[i]); rs_plan_free(&pl[i]); }
    free(v); free(pl); free(vf);
    Py_DECREF(seq);
    PyBuffer_Release(&out);
    return ret;
}

/* resize_crop_jpeg(data, out_h, out_w, top, left, oh, ow, kind, vertical_first=False, max_pixels=0, box=None, flip=False,
 *                  to_end=True) -> (bytearray (3, oh, ow) planar, whether libjpeg warned: counted in jpeg_warnings())
 * The window (top, left, oh, ow) of the JPEG's RGB pixels resized to out_h x out_w (resample_window's), decoded and
 * resized in one call without the GIL. `box` (y, x, h, w): resize that box of the image instead of the whole image, as
 * PIL's crop then resize does (the filter sees only the box's pixels): the training crop. `flip`: the result mirrored
 * left to right (its columns' weights in reverse order: the same bytes as flipping afterwards). libjpeg-turbo decodes
 * only the source columns the window reads (jpeg_crop_scanline; with a margin of RS_MARGIN pixels, as decode_crop's
 * caller adds (decode._CROP_MARGIN): fancy chroma upsampling reads up to 2 away) and skips the rows above them
 * (jpeg_skip_scanlines, with the same margin). The rows below: with `to_end` (eval) skipped but the last, which still
 * reads (entropy-decodes) the file to its end as a whole decode does, so a damaged file is an error or a counted
 * warning as there; without it (training, decode_crop's rule) not read unless the rows reach the last one.
 * The work is rcj_run's, which needs no GIL: the callers hold the input by its Py_buffer and write into memory nobody
 * else reads meanwhile (a new bytearray; resize_crop_jpeg_batch's image of the batch). */
#define RS_MARGIN 2

typedef struct {
    const uint8_t *data; size_t len;                       /* the JPEG file's bytes */
    int out_h, out_w, top, left, oh, ow, kind, vfirst;     /* the window, as resample_window's */
    int whole, sy, sx, sh, sw, flip, to_end;               /* the box (whole: none) and the options */
    Py_ssize_t max_pixels;
} rcj_job;

enum { RCJ_OK, RCJ_VALUE, RCJ_NO_MEMORY };

/* One JPEG's window into dst (3 planes of oh x ow), without the GIL: RCJ_OK, or RCJ_VALUE with the reason in msg (a
 * libjpeg error, the pixel limit, a box outside the image, a bad window), or RCJ_NO_MEMORY. *warned: libjpeg warned
 * (its first message in warning, for note_warning). libjpeg's errors longjmp back to this call's own frame. */
static int rcj_run(const rcj_job *a, uint8_t *dst, char *msg, size_t msg_n, int *warned, char *warning) {
    struct jpeg_decompress_struct cinfo;
    struct err_mgr jerr;
    memset(&cinfo, 0, sizeof cinfo);
    memset(&jerr, 0, sizeof jerr);
    rs_plan p; memset(&p, 0, sizeof p);
    uint8_t *volatile win = NULL;
    volatile size_t win_n = 0;
    volatile int r = RCJ_OK;
    *warned = 0;
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = on_error; jerr.pub.emit_message = on_warning;
    if (setjmp(jerr.jb)) { snprintf(msg, msg_n, "JPEG decode: %s", jerr.msg); r = RCJ_VALUE; goto done; }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)a->data, (unsigned long)a->len);
    jpeg_read_header(&cinfo, TRUE);
    const long long W = (long long)cinfo.image_width, H = (long long)cinfo.image_height;
    if (a->max_pixels > 0 && W * H > (long long)a->max_pixels) {
        snprintf(msg, msg_n, "JPEG header claims %lldx%lld = %lld pixels, over the limit of %zd pixels", W, H, W * H, a->max_pixels);
        r = RCJ_VALUE; goto done;
    }
    int sy = a->sy, sx = a->sx, sh = a->sh, sw = a->sw;
    if (a->whole) { sy = sx = 0; sh = (int)H; sw = (int)W; }
    else if (sy < 0 || sx < 0 || sh < 1 || sw < 1 || (long long)sy + sh > H || (long long)sx + sw > W) {
        snprintf(msg, msg_n, "crop box (top=%d, left=%d, height=%d, width=%d) is not inside the %lldx%lld image", sy, sx, sh, sw, W, H);
        r = RCJ_VALUE; goto done;
    }
    const int built = rs_plan_build(&p, sh, sw, a->out_h, a->out_w, a->top, a->left, a->oh, a->ow, a->kind);
    if (built != RS_MADE) {
        if (built == RS_BAD_WINDOW)
            snprintf(msg, msg_n, RS_BAD_WINDOW_FMT, "resize_crop_jpeg", a->oh, a->ow, a->top, a->left, a->out_h, a->out_w, sh, sw, a->kind);
        r = built == RS_BAD_WINDOW ? RCJ_VALUE : RCJ_NO_MEMORY; goto done;
    }
    if (a->flip) rs_plan_mirror(&p, a->ow);
    /* the source rows ry0..ry1 and columns the window reads, in the image's coordinates; the decoded box: those with a
     * margin, columns widened by libjpeg to whole iMCUs */
    const int ry0 = sy + p.yf, ry1 = sy + p.yl, ys = ry0 > RS_MARGIN ? ry0 - RS_MARGIN : 0;
    const int ye = a->to_end ? (int)H : (ry1 + RS_MARGIN < H ? ry1 + RS_MARGIN : (int)H);  /* rows read up to here */
    JDIMENSION cx = (JDIMENSION)(sx + p.xf > RS_MARGIN ? sx + p.xf - RS_MARGIN : 0);
    JDIMENSION cw = (JDIMENSION)((sx + p.xl + RS_MARGIN < W ? sx + p.xl + RS_MARGIN : (int)W) - (int)cx);
    win_n = (size_t)(ry1 - ry0 + 1) * (size_t)W * 3 + 16;  /* the window's rows and a scratch row; W: room for any widening */
    win = rs_take(0, win_n);
    if (!win) { r = RCJ_NO_MEMORY; goto done; }
    const int cmyk = is_cmyk(&cinfo);
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    jpeg_crop_scanline(&cinfo, &cx, &cw);
    const Py_ssize_t rowb = (Py_ssize_t)cw * 3;
    /* a CMYK JPEG: libjpeg's rows of four samples a pixel (its pool, freed with it), converted as decode_crop does */
    JSAMPARRAY four = cmyk ? (*cinfo.mem->alloc_sarray)((j_common_ptr)&cinfo, JPOOL_IMAGE, cw * 4, 16) : NULL;
    uint8_t *scratch = win + (size_t)(ry1 - ry0) * rowb;  /* the rows decoded outside the window */
    if (ys > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)ys) != (JDIMENSION)ys) {
        snprintf(msg, msg_n, "JPEG decode: could not skip rows"); r = RCJ_VALUE; goto done;
    }
    while ((long long)cinfo.output_scanline < ry1) {  /* a row's pixels do not depend on the rows below */
        /* up to 16 rows a call (libjpeg gives what one pass of its upsampler makes); the margin's rows above the window
         * go to the window's first rows, which its own rows overwrite later */
        const int y = (int)cinfo.output_scanline, above = y < ry0, room = ry1 - ry0;
        int n = above ? ry0 - y : ry1 - y;
        n = n > 16 ? 16 : n;
        if (above && n > room) n = room;
        JSAMPROW rows[16];
        for (int k = 0; k < n; k++) rows[k] = win + (size_t)((above ? 0 : y - ry0) + k) * rowb;
        const JDIMENSION got = jpeg_read_scanlines(&cinfo, four ? four : rows, (JDIMENSION)n);
        if (got < 1) {
            snprintf(msg, msg_n, "JPEG decode: libjpeg made no progress at row %u", cinfo.output_scanline); r = RCJ_VALUE; goto done;
        }
        for (JDIMENSION k = 0; four && k < got; k++) cmyk_row_to_rgb(four[k], rows[k], cw);
    }
    /* the rows below, up to ye: skipped but the last (entropy-decoded, not reconstructed; libjpeg-turbo would not read
     * the data of a skip that reaches the last row), the last one decoded; then, at the image's end, the file's end */
    if ((long long)cinfo.output_scanline < ye - 1) {
        const JDIMENSION rest = (JDIMENSION)(ye - 1 - (int)cinfo.output_scanline);
        if (jpeg_skip_scanlines(&cinfo, rest) != rest) { snprintf(msg, msg_n, "JPEG decode: could not skip rows"); r = RCJ_VALUE; goto done; }
    }
    if ((long long)cinfo.output_scanline < ye) {
        JSAMPROW row = scratch;  /* a CMYK JPEG's last row needs no conversion: only read */
        if (jpeg_read_scanlines(&cinfo, four ? four : &row, 1) != 1) {
            snprintf(msg, msg_n, "JPEG decode: libjpeg made no progress at row %u", cinfo.output_scanline); r = RCJ_VALUE; goto done;
        }
    }
    if (ye == H) jpeg_finish_decompress(&cinfo);
    if (!rs_passes(&p, win + (size_t)(sx + p.xf - (int)cx) * 3, rowb, 3, a->oh, a->ow, a->vfirst, rs_avx2(), dst)) r = RCJ_NO_MEMORY;
done:
    if (jerr.pub.num_warnings) { *warned = 1; memcpy(warning, jerr.warning, JMSG_LENGTH_MAX); }
    jpeg_destroy_decompress(&cinfo);
    rs_plan_free(&p);
    if (win) rs_give(win, win_n);
    return r;
}

/* count a call's warning (rcj_run's), as note_warning does (under warn_lock) */
static void note_rcj_warning(int warned, const char *warning) {
    if (!warned) return;
    WARN_LOCK();
    n_warned++; memcpy(last_warning, warning, sizeof last_warning);
    WARN_UNLOCK();
}

#define RCJ_MSG 512

static PyObject *resize_crop_jpeg(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"data", "out_h", "out_w", "top", "left", "oh", "ow", "kind", "vertical_first", "max_pixels", "box",
                             "flip", "to_end", NULL};
    Py_buffer buf;
    rcj_job a; memset(&a, 0, sizeof a);
    a.to_end = 1;
    PyObject *box = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*iiiiiii|pnOpp", kwlist, &buf, &a.out_h, &a.out_w, &a.top, &a.left, &a.oh, &a.ow,
                                     &a.kind, &a.vfirst, &a.max_pixels, &box, &a.flip, &a.to_end))
        return NULL;
    if (box != Py_None && !PyArg_ParseTuple(box, "iiii;resize_crop_jpeg: box must be (y, x, h, w)", &a.sy, &a.sx, &a.sh, &a.sw)) {
        PyBuffer_Release(&buf); return NULL;
    }
    a.whole = box == Py_None; a.data = buf.buf; a.len = (size_t)buf.len;
    PyObject *out = NULL, *ret = NULL;
    if (a.oh < 1 || a.ow < 1) {  /* the size of the output, before it is made (rcj_run checks the rest of the window) */
        PyErr_Format(PyExc_ValueError, RS_BAD_WINDOW_FMT, "resize_crop_jpeg", a.oh, a.ow, a.top, a.left, a.out_h, a.out_w, 0, 0, a.kind);
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)3 * a.oh * a.ow);
    if (!out) goto done;
    char msg[RCJ_MSG] = "", warning[JMSG_LENGTH_MAX] = "";
    int warned = 0, r;
    Py_BEGIN_ALLOW_THREADS
    r = rcj_run(&a, (uint8_t *)PyByteArray_AS_STRING(out), msg, sizeof msg, &warned, warning);
    Py_END_ALLOW_THREADS
    note_rcj_warning(warned, warning);
    if (r == RCJ_VALUE) { PyErr_SetString(PyExc_ValueError, msg); goto done; }
    if (r == RCJ_NO_MEMORY) { PyErr_NoMemory(); goto done; }
    ret = Py_BuildValue("(OO)", out, warned ? Py_True : Py_False);
done:
    PyBuffer_Release(&buf); Py_XDECREF(out);
    return ret;
}

/* resize_crop_jpeg_batch(items, oh, ow, out, max_pixels=0) -> bytes, a status per item: 0 made, 1 made but libjpeg
 * warned (counted in jpeg_warnings()), 2 not made (the caller makes it alone: resize_crop_jpeg's error, or a fallback).
 * Each item (data, box, (out_h, out_w, top, left), kind, vertical_first, flip, to_end) is what resize_crop_jpeg(data,
 * out_h, out_w, top, left, oh, ow, kind, vertical_first, max_pixels, box, flip, to_end) makes: a training crop (box
 * (y, x, h, w), window (oh, ow, 0, 0), to_end False) or eval's centre window of the whole image (box None, to_end True),
 * written planar into image i of out, a writable buffer of len(items) * 3 * oh * ow bytes (the batch's uint8 NCHW
 * memory). One call per batch, the GIL released for all of it: a batch's Python per sample is a tuple, and the pixels go
 * straight to where the batch lives. The inputs are held by their Py_buffers for the whole call. */
static PyObject *resize_crop_jpeg_batch(PyObject *self, PyObject *args) {
    PyObject *items; int oh, ow; Py_buffer out; Py_ssize_t max_pixels = 0;
    if (!PyArg_ParseTuple(args, "Oiiw*|n", &items, &oh, &ow, &out, &max_pixels)) return NULL;
    PyObject *seq = PySequence_Fast(items, "resize_crop_jpeg_batch: items must be a sequence of (data, box, kind, vertical_first, flip)");
    if (!seq) { PyBuffer_Release(&out); return NULL; }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *v = n ? calloc((size_t)n, sizeof *v) : NULL;
    rcj_job *jobs = n ? calloc((size_t)n, sizeof *jobs) : NULL;
    Py_ssize_t got = 0;
    PyObject *ret = NULL;
    if (n && (!v || !jobs)) { PyErr_NoMemory(); goto done; }
    if (oh < 1 || ow < 1 || out.len < n * 3 * (Py_ssize_t)oh * ow) {
        PyErr_Format(PyExc_ValueError, "resize_crop_jpeg_batch: out holds %zd bytes; %zd images of 3x%dx%d need %zd", out.len, n, oh, ow,
                     n * 3 * (Py_ssize_t)oh * ow);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++, got++) {
        rcj_job *a = &jobs[i];
        PyObject *box;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i),
                              "y*O(iiii)ippp;resize_crop_jpeg_batch: an item is (data, box, (out_h, out_w, top, left), kind, "
                              "vertical_first, flip, to_end)", &v[i], &box, &a->out_h, &a->out_w, &a->top, &a->left, &a->kind,
                              &a->vfirst, &a->flip, &a->to_end))
            goto done;
        if (box != Py_None && !PyArg_ParseTuple(box, "iiii;resize_crop_jpeg_batch: box must be (y, x, h, w) or None", &a->sy, &a->sx,
                                                &a->sh, &a->sw)) {
            PyBuffer_Release(&v[i]); goto done;
        }
        a->whole = box == Py_None; a->data = v[i].buf; a->len = (size_t)v[i].len;
        a->oh = oh; a->ow = ow; a->max_pixels = max_pixels;
    }
    ret = PyBytes_FromStringAndSize(NULL, n);
    if (!ret) goto done;
    char *status = PyBytes_AS_STRING(ret);
    int *warned = n ? calloc((size_t)n, sizeof(int)) : NULL;
    char (*warning)[JMSG_LENGTH_MAX] = n ? calloc((size_t)n, JMSG_LENGTH_MAX) : NULL;
    if (n && (!warned || !warning)) { free(warned); free(warning); Py_CLEAR(ret); PyErr_NoMemory(); goto done; }
    const Py_ssize_t img = 3 * (Py_ssize_t)oh * ow;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        char msg[RCJ_MSG];
        const int r = rcj_run(&jobs[i], (uint8_t *)out.buf + i * img, msg, sizeof msg, &warned[i], warning[i]);
        status[i] = r != RCJ_OK ? 2 : warned[i] ? 1 : 0;
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) note_rcj_warning(warned[i] && status[i] != 2, warning[i]);  /* a failed one warns when made alone */
    free(warned); free(warning);
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    free(v); free(jobs);
    Py_DECREF(seq);
    PyBuffer_Release(&out);
    return ret;
}

/* Hot loops, compiled for AVX2, SSE4.2 and plain x86-64 and picked at load time (GCC function multiversioning),
 * so one build runs fast everywhere; elsewhere they are plain C that the compiler vectorises as it can. */
/* target_clones needs GCC (clang's differs), an x86-64 target and glibc's ifunc loader (musl has none; macOS uses clang). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define HOT __attribute__((target_clones("avx2", "sse4.2", "default")))
#else
#define HOT
#endif

static HOT void affine_img_planar3(const uint8_t *restrict x0, const uint8_t *restrict x1, const uint8_t *restrict x2,
                                   const float *m, const float *b, const float *lo, const float *hi,
                                   float *restrict o0, float *restrict o1, float *restrict o2, Py_ssize_t hw) {
    const float m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3], m4 = m[4], m5 = m[5], m6 = m[6], m7 = m[7], m8 = m[8];
    const float b0 = b[0], b1 = b[1], b2 = b[2], l0 = lo[0], l1 = lo[1], l2 = lo[2], h0 = hi[0], h1 = hi[1], h2 = hi[2];
    for (Py_ssize_t p = 0; p < hw; p++) {
        const float r = (float)x0[p], g = (float)x1[p], bl = (float)x2[p];
        float v0 = m0 * r + m1 * g + m2 * bl + b0, v1 = m3 * r + m4 * g + m5 * bl + b1, v2 = m6 * r + m7 * g + m8 * bl + b2;
        v0 = v0 < l0 ? l0 : v0; v1 = v1 < l1 ? l1 : v1; v2 = v2 < l2 ? l2 : v2;
        o0[p] = v0 > h0 ? h0 : v0; o1[p] = v1 > h1 ? h1 : v1; o2[p] = v2 > h2 ? h2 : v2;
    }
}

static HOT void affine_img_nhwc3(const uint8_t *restrict x, const float *m, const float *b, const float *lo, const float *hi,
                                 float *restrict o0, float *restrict o1, float *restrict o2, Py_ssize_t hw) {
    const float m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3], m4 = m[4], m5 = m[5], m6 = m[6], m7 = m[7], m8 = m[8];
    const float b0 = b[0], b1 = b[1], b2 = b[2], l0 = lo[0], l1 = lo[1], l2 = lo[2], h0 = hi[0], h1 = hi[1], h2 = hi[2];
    for (Py_ssize_t p = 0; p < hw; p++) {
        const float r = (float)x[3 * p], g = (float)x[3 * p + 1], bl = (float)x[3 * p + 2];
        float v0 = m0 * r + m1 * g + m2 * bl + b0, v1 = m3 * r + m4 * g + m5 * bl + b1, v2 = m6 * r + m7 * g + m8 * bl + b2;
        v0 = v0 < l0 ? l0 : v0; v1 = v1 < l1 ? l1 : v1; v2 = v2 < l2 ? l2 : v2;
        o0[p] = v0 > h0 ? h0 : v0; o1[p] = v1 > h1 ? h1 : v1; o2[p] = v2 > h2 ? h2 : v2;
    }
}

/* The same map for channels-last (interleaved) output, with padding: NaFlex patch batches [B, L, P*P*C] are pixels
 * times channels already, so input and output are both (n, hw, c); pixels at or past valid[i] (an image's padded
 * tail of patches) get `fill`, the normalised zero. */
static HOT void affine_img_cl3(const uint8_t *restrict x, const float *m, const float *b, const float *lo, const float *hi,
                               float *restrict o, Py_ssize_t hw) {
    const float m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3], m4 = m[4], m5 = m[5], m6 = m[6], m7 = m[7], m8 = m[8];
    const float b0 = b[0], b1 = b[1], b2 = b[2], l0 = lo[0], l1 = lo[1], l2 = lo[2], h0 = hi[0], h1 = hi[1], h2 = hi[2];
    for (Py_ssize_t p = 0; p < hw; p++) {
        const float r = (float)x[3 * p], g = (float)x[3 * p + 1], bl = (float)x[3 * p + 2];
        float v0 = m0 * r + m1 * g + m2 * bl + b0, v1 = m3 * r + m4 * g + m5 * bl + b1, v2 = m6 * r + m7 * g + m8 * bl + b2;
        v0 = v0 < l0 ? l0 : v0; v1 = v1 < l1 ? l1 : v1; v2 = v2 < l2 ? l2 : v2;
        o[3 * p] = v0 > h0 ? h0 : v0; o[3 * p + 1] = v1 > h1 ? h1 : v1; o[3 * p + 2] = v2 > h2 ? h2 : v2;
    }
}

/* The same pass with non-temporal (streaming) stores, for AVX2 machines and 32-byte aligned planes. A CPU batch
 * (64x3x224x224 float32, 38 MB) does not fit in the cache: ordinary stores first read every output line and then
 * push the workers' images out of the shared L3; streaming stores write around the cache. Same operations in
 * the same order as affine_img_planar3 (no fused multiply-add), so the same floats. */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_STREAM 1
#define AVX2 __attribute__((target("avx2")))
typedef struct { __m256 m[9], b[3], lo[3], hi[3]; } affine8;  /* one image's matrix, bias and bounds, broadcast */

static AVX2 void affine8_init(affine8 *a, const float *m, const float *b, const float *lo, const float *hi) {
    for (int k = 0; k < 9; k++) a->m[k] = _mm256_set1_ps(m[k]);
    for (int k = 0; k < 3; k++) { a->b[k] = _mm256_set1_ps(b[k]); a->lo[k] = _mm256_set1_ps(lo[k]); a->hi[k] = _mm256_set1_ps(hi[k]); }
}

/* 8 pixels given as float R, G, B vectors -> the three output planes at o + p, written around the cache */
static inline AVX2 void affine8_stream(const affine8 *a, __m256 r, __m256 g, __m256 bl, float *o0, float *o1, float *o2, Py_ssize_t p) {
    float *o[3] = {o0, o1, o2};
    for (int k = 0; k < 3; k++) {
        __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a->m[3 * k], r), _mm256_mul_ps(a->m[3 * k + 1], g)),
                                               _mm256_mul_ps(a->m[3 * k + 2], bl)), a->b[k]);
        /* clamp as the C code does: below lo -> lo, then above hi -> hi */
        _mm256_stream_ps(o[k] + p, _mm256_min_ps(_mm256_max_ps(v, a->lo[k]), a->hi[k]));
    }
}

static inline AVX2 __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

static AVX2 void affine_img_planar3_stream(const uint8_t *restrict x0, const uint8_t *restrict x1, const uint8_t *restrict x2,
                                           const float *m, const float *b, const float *lo, const float *hi,
                                           float *restrict o0, float *restrict o1, float *restrict o2, Py_ssize_t hw) {
    affine8 a; affine8_init(&a, m, b, lo, hi);
    Py_ssize_t p = 0;
    for (; p + 8 <= hw; p += 8)
        affine8_stream(&a, u8x8_to_ps(_mm_loadl_epi64((const __m128i *)(x0 + p))), u8x8_to_ps(_mm_loadl_epi64((const __m128i *)(x1 + p))),
                       u8x8_to_ps(_mm_loadl_epi64((const __m128i *)(x2 + p))), o0, o1, o2, p);
    _mm_sfence();
    if (p < hw) affine_img_planar3(x0 + p, x1 + p, x2 + p, m, b, lo, hi, o0 + p, o1 + p, o2 + p, hw - p);
}

/* Channels-last input: 8 pixels (24 bytes) are split into their R, G and B bytes with byte shuffles. */
static AVX2 void affine_img_nhwc3_stream(const uint8_t *restrict x, const float *m, const float *b, const float *lo, const float *hi,
                                         float *restrict o0, float *restrict o1, float *restrict o2, Py_ssize_t hw) {
    affine8 a; affine8_init(&a, m, b, lo, hi);
    /* bytes 0-15 in lo16, 16-23 in the low half of hi8; -1 lanes give 0 */
    const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i rc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i gc = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i bc = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    Py_ssize_t p = 0;
    for (; p + 8 <= hw; p += 8) {
        const __m128i lo16 = _mm_loadu_si128((const __m128i *)(x + 3 * p)), hi8 = _mm_loadl_epi64((const __m128i *)(x + 3 * p + 16));
        affine8_stream(&a, u8x8_to_ps(_mm_or_si128(_mm_shuffle_epi8(lo16, ra), _mm_shuffle_epi8(hi8, rc))),
                       u8x8_to_ps(_mm_or_si128(_mm_shuffle_epi8(lo16, ga), _mm_shuffle_epi8(hi8, gc))),
                       u8x8_to_ps(_mm_or_si128(_mm_shuffle_epi8(lo16, ba), _mm_shuffle_epi8(hi8, bc))), o0, o1, o2, p);
    }
    _mm_sfence();
    if (p < hw) affine_img_nhwc3(x + 3 * p, m, b, lo, hi, o0 + p, o1 + p, o2 + p, hw - p);
}

/* set_streaming(False) turns the streaming passes off: tests and measurements compare both. Read by the passes without
 * the GIL while another thread may set it: atomic loads and stores (relaxed: a pass sees the old or the new setting,
 * and either gives the same floats). cpu_avx2 is set once when the module is imported. */
static int stream_on = 1;
static int cpu_avx2 = 0;
static void detect_cpu(void) { __builtin_cpu_init(); cpu_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0; }
static int can_stream(const float *o0, const float *o1, const float *o2) {
    return __atomic_load_n(&stream_on, __ATOMIC_RELAXED) && cpu_avx2 && ((((uintptr_t)o0) | ((uintptr_t)o1) | ((uintptr_t)o2)) & 31) == 0;
}
#else
#define HAVE_STREAM 0
static int stream_on = 0;
static void detect_cpu(void) {}
#endif

/* set_streaming(on) -> whether streaming stores were on before; never on where this build has none */
static PyObject *set_streaming(PyObject *self, PyObject *args) {
    int on; if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    int old = __atomic_exchange_n(&stream_on, HAVE_STREAM && on, __ATOMIC_RELAXED);
    return PyBool_FromLong(old);
}

static HOT void sum3_u8(const uint8_t *restrict p, Py_ssize_t npix, uint64_t *s) {
    /* per-channel sums of interleaved RGB: 48 lanes (16 pixels) summed contiguously, lane j belongs to channel j % 3 */
    uint32_t acc[48] = {0};
    Py_ssize_t nb = npix * 3, k = 0;
    for (; k + 48 <= nb; k += 48) for (int j = 0; j < 48; j++) acc[j] += p[k + j];  /* < 2^24 pixels: no overflow */
    for (int j = 0; j < 48; j++) s[j % 3] += acc[j];
    for (; k < nb; k++) s[k % 3] += p[k];
}

static HOT uint64_t sum_u8(const uint8_t *restrict p, Py_ssize_t len, Py_ssize_t stride) {
    uint64_t s = 0;  /* uint32 partial sums cannot overflow in 2^16 bytes */
    for (Py_ssize_t k0 = 0; k0 < len; k0 += 1 << 16) {
        Py_ssize_t k1 = k0 + (1 << 16) < len ? k0 + (1 << 16) : len; uint32_t a = 0;
        if (stride == 1) { for (Py_ssize_t k = k0; k < k1; k++) a += p[k]; }
        else { for (Py_ssize_t k = k0; k < k1; k++) a += p[k * stride]; }
        s += a;
    }
    return s;
}

/* channel_means(x uint8 (n, c, hw) buffer, out float32 (n, c) buffer, n, c, hw): per image and channel mean */
static PyObject *channel_means(PyObject *self, PyObject *args) {
    Py_buffer x, out; Py_ssize_t n, c, hw;
    if (!PyArg_ParseTuple(args, "y*w*nnn", &x, &out, &n, &c, &hw)) return NULL;
    PyObject *ret = NULL;
    if (!sizes_ok("channel_means", n, c, hw, 1) || !fits(&x, n * c * hw, 1, "channel_means x") || !fits(&out, n * c, 4, "channel_means out")) goto done;
    const uint8_t *px = (const uint8_t *)x.buf; float *po = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n * c; i++) po[i] = (float)((double)sum_u8(px + i * hw, hw, 1) / (double)hw);
    Py_END_ALLOW_THREADS
    ret = Py_None; Py_INCREF(ret);
done:
    PyBuffer_Release(&x); PyBuffer_Release(&out);
    return ret;
}
/* the buffers of affine_u8 / affine_u8_nhwc hold what (n, c, hw) say they do, else 0 with ValueError set */
static int affine_args_ok(const char *name, const Py_buffer *x, const Py_buffer *m, const Py_buffer *b, const Py_buffer *lo,
                          const Py_buffer *hi, const Py_buffer *out, Py_ssize_t n, Py_ssize_t c, Py_ssize_t hw) {
    if (!sizes_ok(name, n, c, hw, 0)) return 0;
    const Py_buffer *bufs[6] = {x, out, m, b, lo, hi};
    const char *names[6] = {"x", "out", "m", "b", "lo", "hi"};
    const Py_ssize_t need[6] = {n * c * hw, n * c * hw, n * c * c, n * c, c, c}, item[6] = {1, 4, 4, 4, 4, 4};
    char label[64];
    for (int k = 0; k < 6; k++) {
        snprintf(label, sizeof label, "%s %s", name, names[k]);
        if (!fits(bufs[k], need[k], item[k], label)) return 0;
    }
    return 1;
}

/* affine_u8(x uint8 (n, c, hw), m float32 (n, c, c), b float32 (n, c), lo float32 (c), hi float32 (c), out float32 (n, c, hw), n, c, hw):
 * out[i, o, p] = clamp(sum_k m[i, o, k] * x[i, k, p] + b[i, o], lo[o], hi[o]) */
static PyObject *affine_u8(PyObject *self, PyObject *args) {
    Py_buffer x, m, b, lo, hi, out; Py_ssize_t n, c, hw; PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*nnn", &x, &m, &b, &lo, &hi, &out, &n, &c, &hw)) return NULL;
    if (!affine_args_ok("affine_u8", &x, &m, &b, &lo, &hi, &out, n, c, hw)) goto done;
    const uint8_t *px = (const uint8_t *)x.buf; const float *pm = (const float *)m.buf, *pb = (const float *)b.buf;
    const float *plo = (const float *)lo.buf, *phi = (const float *)hi.buf; float *po = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *xi = px + i * c * hw;
        float *oi = po + i * c * hw;
        if (c == 3) {
#if HAVE_STREAM
            if (can_stream(oi, oi + hw, oi + 2 * hw)) {
                affine_img_planar3_stream(xi, xi + hw, xi + 2 * hw, pm + i * 9, pb + i * 3, plo, phi, oi, oi + hw, oi + 2 * hw, hw);
                continue;
            }
#endif
            affine_img_planar3(xi, xi + hw, xi + 2 * hw, pm + i * 9, pb + i * 3, plo, phi, oi, oi + hw, oi + 2 * hw, hw); continue;
        }
        for (Py_ssize_t co = 0; co < c; co++) {
            float *o = oi + co * hw; const float *mr = pm + (i * c + co) * c; const float l = plo[co], h = phi[co];
            for (Py_ssize_t p = 0; p < hw; p++) {
                float v = pb[i * c + co]; for (Py_ssize_t k = 0; k < c; k++) v += mr[k] * (float)xi[k * hw + p];
                v = v < l ? l : v; o[p] = v > h ? h : v;
            }
        }
    }
    Py_END_ALLOW_THREADS
    ret = Py_None; Py_INCREF(ret);
done:
    PyBuffer_Release(&x); PyBuffer_Release(&m); PyBuffer_Release(&b); PyBuffer_Release(&lo); PyBuffer_Release(&hi); PyBuffer_Release(&out);
    return ret;
}

/* The same two passes for a channels-last batch (n, hw, c) in memory (an NCHW tensor with channels_last strides):
 * collating the crops that way is a plain copy, and this pass does the transposition to planar output for free. */
static PyObject *channel_means_nhwc(PyObject *self, PyObject *args) {
    Py_buffer x, out; Py_ssize_t n, c, hw;
    if (!PyArg_ParseTuple(args, "y*w*nnn", &x, &out, &n, &c, &hw)) return NULL;
    PyObject *ret = NULL;
    if (!sizes_ok("channel_means_nhwc", n, c, hw, 1) || !fits(&x, n * c * hw, 1, "channel_means_nhwc x") ||
        !fits(&out, n * c, 4, "channel_means_nhwc out")) goto done;
    const uint8_t *px = (const uint8_t *)x.buf; float *po = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = px + i * hw * c;
        if (c == 3) {
            uint64_t s[3] = {0, 0, 0}; sum3_u8(p, hw, s);
            for (int ch = 0; ch < 3; ch++) po[i * 3 + ch] = (float)((double)s[ch] / (double)hw);
        } else for (Py_ssize_t ch = 0; ch < c; ch++) po[i * c + ch] = (float)((double)sum_u8(p + ch, hw, c) / (double)hw);
    }
    Py_END_ALLOW_THREADS
    ret = Py_None; Py_INCREF(ret);
done:
    PyBuffer_Release(&x); PyBuffer_Release(&out);
    return ret;
}

static PyObject *affine_u8_nhwc(PyObject *self, PyObject *args) {
    Py_buffer x, m, b, lo, hi, out; Py_ssize_t n, c, hw; PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*nnn", &x, &m, &b, &lo, &hi, &out, &n, &c, &hw)) return NULL;
    if (!affine_args_ok("affine_u8_nhwc", &x, &m, &b, &lo, &hi, &out, n, c, hw)) goto done;
    const uint8_t *px = (const uint8_t *)x.buf; const float *pm = (const float *)m.buf, *pb = (const float *)b.buf;
    const float *plo = (const float *)lo.buf, *phi = (const float *)hi.buf; float *po = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *xi = px + i * hw * c; const float *mi = pm + i * c * c, *bi = pb + i * c;
        if (c == 3) {
            float *o0 = po + (i * 3) * hw, *o1 = o0 + hw, *o2 = o1 + hw;
#if HAVE_STREAM
            if (can_stream(o0, o1, o2)) { affine_img_nhwc3_stream(xi, mi, bi, plo, phi, o0, o1, o2, hw); continue; }
#endif
            affine_img_nhwc3(xi, mi, bi, plo, phi, o0, o1, o2, hw);
        } else {
            for (Py_ssize_t co = 0; co < c; co++) {
                float *o = po + (i * c + co) * hw; const float l = plo[co], h = phi[co];
                for (Py_ssize_t p = 0; p < hw; p++) {
                    float v = bi[co]; for (Py_ssize_t k = 0; k < c; k++) v += mi[co * c + k] * (float)xi[p * c + k];
                    v = v < l ? l : v; o[p] = v > h ? h : v;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    ret = Py_None; Py_INCREF(ret);
done:
    PyBuffer_Release(&x); PyBuffer_Release(&m); PyBuffer_Release(&b); PyBuffer_Release(&lo); PyBuffer_Release(&hi); PyBuffer_Release(&out);
    return ret;
}

/* affine_u8_cl(x uint8 (n, hw, c), m float32 (n, c, c), b float32 (n, c), lo, hi, fill float32 (c), valid int64 (n),
 * out float32 (n, hw, c), n, c, hw): out[i, p] = clamp(m[i] @ x[i, p] + b[i], lo, hi) for p < valid[i], else fill */
static PyObject *affine_u8_cl(PyObject *self, PyObject *args) {
    Py_buffer x, m, b, lo, hi, fill, valid, out; Py_ssize_t n, c, hw;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*nnn", &x, &m, &b, &lo, &hi, &fill, &valid, &out, &n, &c, &hw)) return NULL;
    PyObject *ret = NULL;
    if (n < 0 || c < 1 || hw < 0 || (hw && n > PY_SSIZE_T_MAX / hw) || (n * hw != 0 && c > PY_SSIZE_T_MAX / (n * hw))) {
        PyErr_Format(PyExc_ValueError, "affine_u8_cl: bad sizes n=%zd c=%zd hw=%zd", n, c, hw); goto done;
    }
    if (!fits(&x, n * hw * c, 1, "affine_u8_cl x") || !fits(&out, n * hw * c, 4, "affine_u8_cl out") ||
        !fits(&m, n * c * c, 4, "affine_u8_cl m") || !fits(&b, n * c, 4, "affine_u8_cl b") || !fits(&lo, c, 4, "affine_u8_cl lo") ||
        !fits(&hi, c, 4, "affine_u8_cl hi") || !fits(&fill, c, 4, "affine_u8_cl fill") || !fits(&valid, n, 8, "affine_u8_cl valid")) goto done;
    const uint8_t *px = (const uint8_t *)x.buf; const float *pm = (const float *)m.buf, *pb = (const float *)b.buf;
    const float *plo = (const float *)lo.buf, *phi = (const float *)hi.buf, *pf = (const float *)fill.buf;
    const int64_t *pv = (const int64_t *)valid.buf; float *po = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *xi = px + i * hw * c; const float *mi = pm + i * c * c, *bi = pb + i * c; float *oi = po + i * hw * c;
        Py_ssize_t v = pv[i] < 0 ? 0 : (pv[i] > hw ? hw : (Py_ssize_t)pv[i]);
        if (c == 3) affine_img_cl3(xi, mi, bi, plo, phi, oi, v);
        else for (Py_ssize_t p = 0; p < v; p++)
            for (Py_ssize_t co = 0; co < c; co++) {
                float u = bi[co]; for (Py_ssize_t k = 0; k < c; k++) u += mi[co * c + k] * (float)xi[p * c + k];
                u = u < plo[co] ? plo[co] : u; oi[p * c + co] = u > phi[co] ? phi[co] : u;
            }
        for (Py_ssize_t p = v; p < hw; p++) for (Py_ssize_t co = 0; co < c; co++) oi[p * c + co] = pf[co];
    }
    Py_END_ALLOW_THREADS
    ret = Py_None; Py_INCREF(ret);
done:
    PyBuffer_Release(&x); PyBuffer_Release(&m); PyBuffer_Release(&b); PyBuffer_Release(&lo); PyBuffer_Release(&hi);
    PyBuffer_Release(&fill); PyBuffer_Release(&valid); PyBuffer_Release(&out);
    return ret;
}

/* Busy flags of the shared batch ring (int32 in shared memory): taking a slot is an atomic compare-and-swap 0 -> 1 with
 * acquire ordering (the worker's writes into the slot come after it), freeing it a release store of 0 (the main
 * process's reads of the slot are done before a worker can see it free), on every CPU, weakly ordered ones included. */
static int32_t *flag_at(Py_buffer *v, Py_ssize_t i) {
    if (i < 0 || i >= v->len / 4) { PyErr_Format(PyExc_IndexError, "ring flag %zd out of range (%zd flags)", i, v->len / 4); return NULL; }
    if (((uintptr_t)v->buf) & 3) { PyErr_SetString(PyExc_ValueError, "ring flags must be 4-byte aligned"); return NULL; }
    return (int32_t *)v->buf + i;
}
static PyObject *flag_acquire(PyObject *self, PyObject *args) {
    Py_buffer v; Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "w*n", &v, &i)) return NULL;
    int32_t *f = flag_at(&v, i), expected = 0; int ok = 0;
    if (f) ok = __atomic_compare_exchange_n(f, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    PyBuffer_Release(&v);
    if (!f) return NULL;
    return PyBool_FromLong(ok);
}
static PyObject *flag_release(PyObject *self, PyObject *args) {
    Py_buffer v; Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "w*n", &v, &i)) return NULL;
    int32_t *f = flag_at(&v, i);
    if (f) __atomic_store_n(f, 0, __ATOMIC_RELEASE);
    PyBuffer_Release(&v);
    if (!f) return NULL;
    Py_RETURN_NONE;
}

/* The first float32 that torch.rand(1) gives from a CPU generator made by torch.Generator().manual_seed(seed), for
 * 0 <= seed < 2^64: torch seeds MT19937 with the seed's low 32 bits, and its first output after the first twist reads
 * state words 0, 1 and 397 only (397 steps of the seeding recurrence, not 624 words and a full twist); tempered, its
 * low 24 bits over 2^24 are torch's float. No buffers, no GIL needed: a sample's flip draw without making a generator. */
static PyObject *torch_first_rand(PyObject *self, PyObject *arg) {
    unsigned long long seed = PyLong_AsUnsignedLongLong(arg);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    uint32_t s = (uint32_t)seed, s0 = s, s1 = 0;
    for (uint32_t i = 1; i <= 397; i++) {
        s = 1812433253u * (s ^ (s >> 30)) + i;
        if (i == 1) s1 = s;
    }
    uint32_t y = (s0 & 0x80000000u) | (s1 & 0x7fffffffu);
    uint32_t v = s ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    v ^= v >> 11;
    v ^= (v << 7) & 0x9d2c5680u;
    v ^= (v << 15) & 0xefc60000u;
    v ^= v >> 18;
    return PyFloat_FromDouble((double)(v & 0xffffffu) / 16777216.0);
}

/* Pillow's transform filters (Geometry.c), the same double arithmetic in the same order: a bilinear step
 * a + (b - a) * d, and a cubic through four taps in Horner form. Built without -march, so no FMA contraction. */
static inline double wa_lerp(double a, double b, double d) { return a + (b - a) * d; }
static inline double wa_cubic(double v1, double v2, double v3, double v4, double d) {
    double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}
static inline uint8_t wa_clip(double r) { return r <= 0.0 ? 0 : r >= 255.0 ? 255 : (uint8_t)r; }
static inline int wa_clamp(int v, int n) { return v < 0 ? 0 : v < n ? v : n - 1; }

/* One output row of warp_affine for C channels (a literal at each call: the channel loops unroll, and the twelve
 * cubics of a pixel are independent chains the CPU overlaps). A zero fraction gives a tap exactly (a + (b - a) * 0 == a,
 * p1 + 0 * (...) == p1), so a shear or translation along one axis skips the other axis's arithmetic, same bytes. */
static inline void wa_row(const uint8_t *base, Py_ssize_t rs, int H, int W, const int C, const double *a, const double *ax0,
                          const double *ax3, int y, int kind, const uint8_t *fill, uint8_t *o) {
    const double yin = y + 0.5, by = a[1] * yin, ey = a[4] * yin;
    for (int x = 0; x < W; x++, o += C) {
        double xx = ax0[x] + by + a[2];
        double yy = ax3[x] + ey + a[5];
        if (xx < 0.0 || xx >= W || yy < 0.0 || yy >= H) {
            for (int c = 0; c < C; c++) o[c] = fill[c];
            continue;
        }
        xx -= 0.5;
        yy -= 0.5;
        int ix = xx < 0.0 ? (int)floor(xx) : (int)xx, iy = yy < 0.0 ? (int)floor(yy) : (int)yy;
        const double dx = xx - ix, dy = yy - iy;
        if (kind == 0) {
            /* rows y (clipped) and y + 1 (when past the edge, Pillow takes the first row's value: the same as clipped) */
            const uint8_t *r0 = base + (size_t)wa_clamp(iy, H) * rs, *r1 = base + (size_t)wa_clamp(iy + 1, H) * rs;
            const int x0 = wa_clamp(ix, W) * C, x1 = wa_clamp(ix + 1, W) * C;
            if (dy == 0.0) {
                for (int c = 0; c < C; c++) o[c] = (uint8_t)wa_lerp(r0[x0 + c], r0[x1 + c], dx);
            } else if (dx == 0.0) {
                for (int c = 0; c < C; c++) o[c] = (uint8_t)wa_lerp(r0[x0 + c], r1[x0 + c], dy);
            } else {
                for (int c = 0; c < C; c++)
                    o[c] = (uint8_t)wa_lerp(wa_lerp(r0[x0 + c], r0[x1 + c], dx), wa_lerp(r1[x0 + c], r1[x1 + c], dx), dy);
            }
        } else {
            ix--;
            iy--;
            const int x0 = wa_clamp(ix, W) * C, x1 = wa_clamp(ix + 1, W) * C, x2 = wa_clamp(ix + 2, W) * C, x3 = wa_clamp(ix + 3, W) * C;
            const uint8_t *r0 = base + (size_t)wa_clamp(iy, H) * rs, *r1 = base + (size_t)wa_clamp(iy + 1, H) * rs,
                          *r2 = base + (size_t)wa_clamp(iy + 2, H) * rs, *r3 = base + (size_t)wa_clamp(iy + 3, H) * rs;
            if (dy == 0.0 && dx == 0.0) {
                for (int c = 0; c < C; c++) o[c] = r1[x1 + c];
            } else if (dy == 0.0) {
                for (int c = 0; c < C; c++) o[c] = wa_clip(wa_cubic(r1[x0 + c], r1[x1 + c], r1[x2 + c], r1[x3 + c], dx));
            } else if (dx == 0.0) {
                for (int c = 0; c < C; c++) o[c] = wa_clip(wa_cubic(r0[x1 + c], r1[x1 + c], r2[x1 + c], r3[x1 + c], dy));
            } else {
                for (int c = 0; c < C; c++) {
                    double w0 = wa_cubic(r0[x0 + c], r0[x1 + c], r0[x2 + c], r0[x3 + c], dx);
                    double w1 = wa_cubic(r1[x0 + c], r1[x1 + c], r1[x2 + c], r1[x3 + c], dx);
                    double w2 = wa_cubic(r2[x0 + c], r2[x1 + c], r2[x2 + c], r2[x3 + c], dx);
                    double w3 = wa_cubic(r3[x0 + c], r3[x1 + c], r3[x2 + c], r3[x3 + c], dx);
                    o[c] = wa_clip(wa_cubic(w0, w1, w2, w3, dy));
                }
            }
        }
    }
}

#if RS_AVX2
/* warp_affine's row for RGB with AVX2: the three channels of a tap in the lanes of one vector of doubles (the fourth
 * lane idle), so each of Pillow's double steps (the lerps, the cubics in Horner form, the clip) runs once for the
 * three channels: the same operations, in the same order, on each lane (no FMA: the target is AVX2 alone), so the
 * same bytes. `base` is a copy of the source with a byte of slack at its end: a tap loads 4 bytes. */
static inline __attribute__((always_inline)) RS_TARGET __m256d wa_tap(const uint8_t *p) {
    int32_t t;
    memcpy(&t, p, 4);
    return _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(t)));
}
static inline __attribute__((always_inline)) RS_TARGET __m256d wa_lerp4(__m256d a, __m256d b, __m256d d) { return _mm256_add_pd(a, _mm256_mul_pd(_mm256_sub_pd(b, a), d)); }
static inline __attribute__((always_inline)) RS_TARGET __m256d wa_cubic4(__m256d v1, __m256d v2, __m256d v3, __m256d v4, __m256d d) {
    const __m256d two = _mm256_set1_pd(2.0);
    __m256d p2 = _mm256_sub_pd(v3, v1);  /* -v1 + v3: the same double */
    __m256d p3 = _mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(two, _mm256_sub_pd(v1, v2)), v3), v4);
    __m256d p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(v2, v1), v3), v4);  /* -v1 + v2 - v3 + v4 */
    return _mm256_add_pd(v2, _mm256_mul_pd(d, _mm256_add_pd(p2, _mm256_mul_pd(d, _mm256_add_pd(p3, _mm256_mul_pd(d, p4))))));
}
static inline __attribute__((always_inline)) RS_TARGET int32_t wa_pack3(__m256d r) {  /* wa_clip on each lane: clamp to 0..255, truncate; the bytes in the low 3 of the result */
    r = _mm256_min_pd(_mm256_max_pd(r, _mm256_setzero_pd()), _mm256_set1_pd(255.0));
    __m128i i = _mm256_cvttpd_epi32(r);
    i = _mm_packus_epi16(_mm_packus_epi32(i, i), i);
    return _mm_cvtsi128_si32(i);
}
/* One output pixel from its source point's integer part (ix, iy) and fraction (dx, dy), as wa_row's */
static inline __attribute__((always_inline)) RS_TARGET int32_t wa_pixel3(const uint8_t *base, Py_ssize_t rs, int H, int W, int kind, int ix, int iy,
                                                                             double dx, double dy) {
    const __m256d vdx = _mm256_set1_pd(dx), vdy = _mm256_set1_pd(dy);
    if (kind == 0) {
        const uint8_t *r0 = base + (size_t)wa_clamp(iy, H) * rs, *r1 = base + (size_t)wa_clamp(iy + 1, H) * rs;
        const int x0 = wa_clamp(ix, W) * 3, x1 = wa_clamp(ix + 1, W) * 3;
        __m256d r;
        if (dy == 0.0) r = wa_lerp4(wa_tap(r0 + x0), wa_tap(r0 + x1), vdx);
        else if (dx == 0.0) r = wa_lerp4(wa_tap(r0 + x0), wa_tap(r1 + x0), vdy);
        else r = wa_lerp4(wa_lerp4(wa_tap(r0 + x0), wa_tap(r0 + x1), vdx), wa_lerp4(wa_tap(r1 + x0), wa_tap(r1 + x1), vdx), vdy);
        return wa_pack3(r);  /* in 0..255 already: the clamp changes nothing, the truncation is the (uint8) cast's */
    }
    ix--;
    iy--;
    const int x0 = wa_clamp(ix, W) * 3, x1 = wa_clamp(ix + 1, W) * 3, x2 = wa_clamp(ix + 2, W) * 3, x3 = wa_clamp(ix + 3, W) * 3;
    if (dy == 0.0) {
        const uint8_t *r1 = base + (size_t)wa_clamp(iy + 1, H) * rs;
        if (dx == 0.0) { int32_t t; memcpy(&t, r1 + x1, 4); return t; }
        return wa_pack3(wa_cubic4(wa_tap(r1 + x0), wa_tap(r1 + x1), wa_tap(r1 + x2), wa_tap(r1 + x3), vdx));
    }
    const uint8_t *r0 = base + (size_t)wa_clamp(iy, H) * rs, *r1 = base + (size_t)wa_clamp(iy + 1, H) * rs,
                  *r2 = base + (size_t)wa_clamp(iy + 2, H) * rs, *r3 = base + (size_t)wa_clamp(iy + 3, H) * rs;
    if (dx == 0.0) {
        return wa_pack3(wa_cubic4(wa_tap(r0 + x1), wa_tap(r1 + x1), wa_tap(r2 + x1), wa_tap(r3 + x1), vdy));
    }
    __m256d w0 = wa_cubic4(wa_tap(r0 + x0), wa_tap(r0 + x1), wa_tap(r0 + x2), wa_tap(r0 + x3), vdx);
    __m256d w1 = wa_cubic4(wa_tap(r1 + x0), wa_tap(r1 + x1), wa_tap(r1 + x2), wa_tap(r1 + x3), vdx);
    __m256d w2 = wa_cubic4(wa_tap(r2 + x0), wa_tap(r2 + x1), wa_tap(r2 + x2), wa_tap(r2 + x3), vdx);
    __m256d w3 = wa_cubic4(wa_tap(r3 + x0), wa_tap(r3 + x1), wa_tap(r3 + x2), wa_tap(r3 + x3), vdx);
    return wa_pack3(wa_cubic4(w0, w1, w2, w3, vdy));
}

/* Four pixels' twelve bytes from three vectors of four doubles (wa_pack3's clip and truncation on each lane) */
static inline __attribute__((always_inline)) RS_TARGET void wa_store12(uint8_t *o, __m256d r0, __m256d r1, __m256d r2) {
    const __m256d zero = _mm256_setzero_pd(), top = _mm256_set1_pd(255.0);
    const __m128i i0 = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(r0, zero), top));
    const __m128i i1 = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(r1, zero), top));
    const __m128i i2 = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(r2, zero), top));
    uint8_t t[16];
    _mm_storeu_si128((__m128i *)t, _mm_packus_epi16(_mm_packus_epi32(i0, i1), _mm_packus_epi32(i2, i2)));
    memcpy(o, t, 12);
}

/* Four pixels of a row whose source points share their row and its fraction (a matrix with d == 0: translations and
 * shears along x) and whose columns follow one another, no tap clamped: wa_pixel3's steps on each of their twelve
 * bytes, four bytes a vector. A byte's taps are the bytes 3 apart (its pixel's neighbours, same channel) and its
 * fraction its pixel's, so `dx` spread over the bytes (dx0 dx0 dx0 dx1 | dx1 dx1 dx2 dx2 | dx2 dx3 dx3 dx3). 1 when
 * made; 0 where the group is not such (the caller makes its pixels one by one). */
static inline __attribute__((always_inline)) RS_TARGET int wa_group12(const uint8_t *base, Py_ssize_t rs, int H, int W, int kind, int ix, int iy,
                                                                      __m256d ddx, int dx_zero, double dy, uint8_t *o) {
    __m256d d[3];
    d[0] = _mm256_permute4x64_pd(ddx, 0x40);
    d[1] = _mm256_permute4x64_pd(ddx, 0xA5);
    d[2] = _mm256_permute4x64_pd(ddx, 0xFE);
    __m256d r[3];
    if (dy == 0.0) {  /* along the row: the pixels' own fractions */
        if (kind == 0) {
            if (ix < 0 || ix + 4 > W - 1) return 0;
            const uint8_t *p = base + (size_t)wa_clamp(iy, H) * rs + 3 * (size_t)ix;
            for (int j = 0; j < 3; j++) r[j] = wa_lerp4(wa_tap(p + 4 * j), wa_tap(p + 4 * j + 3), d[j]);
        } else {
            if (ix < 1 || ix + 5 > W - 1) return 0;
            const uint8_t *p = base + (size_t)wa_clamp(iy, H) * rs + 3 * (size_t)ix;
            for (int j = 0; j < 3; j++)
                r[j] = wa_cubic4(wa_tap(p + 4 * j - 3), wa_tap(p + 4 * j), wa_tap(p + 4 * j + 3), wa_tap(p + 4 * j + 6), d[j]);
        }
    } else if (dx_zero) {  /* across rows: the row's fraction for every byte */
        if (ix < 0 || ix + 3 > W - 1) return 0;
        const __m256d vdy = _mm256_set1_pd(dy);
        if (kind == 0) {
            const uint8_t *p0 = base + (size_t)wa_clamp(iy, H) * rs + 3 * (size_t)ix, *p1 = base + (size_t)wa_clamp(iy + 1, H) * rs + 3 * (size_t)ix;
            for (int j = 0; j < 3; j++) r[j] = wa_lerp4(wa_tap(p0 + 4 * j), wa_tap(p1 + 4 * j), vdy);
        } else {
            const uint8_t *q[4];
            for (int k = 0; k < 4; k++) q[k] = base + (size_t)wa_clamp(iy - 1 + k, H) * rs + 3 * (size_t)ix;
            for (int j = 0; j < 3; j++)
                r[j] = wa_cubic4(wa_tap(q[0] + 4 * j), wa_tap(q[1] + 4 * j), wa_tap(q[2] + 4 * j), wa_tap(q[3] + 4 * j), vdy);
        }
    } else {
        return 0;
    }
    wa_store12(o, r[0], r[1], r[2]);
    return 1;
}

/* The row four pixels at a time: their source points, the test against the image, the floors and the fractions in
 * vectors of doubles (the same operations as the scalar code: sums in the same order, floor exact, and for a point
 * inside the image (int)x == floor(x) when x >= 0), then each pixel's taps (or the four as one group: wa_group12) */
static RS_TARGET void wa_row3_avx2(const uint8_t *base, Py_ssize_t rs, int H, int W, const double *a, const double *ax0,
                                   const double *ax3, int y, int kind, const uint8_t *fill, uint8_t *o) {
    const double yin = y + 0.5, by = a[1] * yin, ey = a[4] * yin;
    const int row_shared = a[3] == 0.0;  /* every pixel's source point on one row, with one fraction (d == 0) */
    const __m256d vby = _mm256_set1_pd(by), vey = _mm256_set1_pd(ey), va2 = _mm256_set1_pd(a[2]), va5 = _mm256_set1_pd(a[5]);
    const __m256d zero = _mm256_setzero_pd(), vw = _mm256_set1_pd((double)W), vh = _mm256_set1_pd((double)H), half = _mm256_set1_pd(0.5);
    int x = 0;
    for (; x + 4 <= W; x += 4) {
        __m256d xx = _mm256_add_pd(_mm256_add_pd(_mm256_loadu_pd(ax0 + x), vby), va2);
        __m256d yy = _mm256_add_pd(_mm256_add_pd(_mm256_loadu_pd(ax3 + x), vey), va5);
        __m256d in = _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(xx, zero, _CMP_GE_OQ), _mm256_cmp_pd(xx, vw, _CMP_LT_OQ)),
                                   _mm256_and_pd(_mm256_cmp_pd(yy, zero, _CMP_GE_OQ), _mm256_cmp_pd(yy, vh, _CMP_LT_OQ)));
        const int inside = _mm256_movemask_pd(in);
        xx = _mm256_sub_pd(xx, half);
        yy = _mm256_sub_pd(yy, half);
        const __m256d fx = _mm256_floor_pd(xx), fy = _mm256_floor_pd(yy), ddx = _mm256_sub_pd(xx, fx);
        double dxs[4], dys[4];
        int ixs[4], iys[4];
        _mm256_storeu_pd(dxs, ddx);
        _mm256_storeu_pd(dys, _mm256_sub_pd(yy, fy));
        /* floors of points outside the image may not fit an int: only the inside ones are used */
        _mm_storeu_si128((__m128i *)ixs, _mm256_cvttpd_epi32(_mm256_blendv_pd(zero, fx, in)));
        _mm_storeu_si128((__m128i *)iys, _mm256_cvttpd_epi32(_mm256_blendv_pd(zero, fy, in)));
        if (row_shared && inside == 15 && ixs[1] == ixs[0] + 1 && ixs[2] == ixs[0] + 2 && ixs[3] == ixs[0] + 3
            && wa_group12(base, rs, H, W, kind, ixs[0], iys[0], ddx, _mm256_movemask_pd(_mm256_cmp_pd(ddx, zero, _CMP_EQ_OQ)) == 15,
                          dys[0], o + (size_t)x * 3))
            continue;
        for (int k = 0; k < 4; k++) {
            uint8_t *ok = o + (size_t)(x + k) * 3;
            if (!(inside >> k & 1)) { ok[0] = fill[0]; ok[1] = fill[1]; ok[2] = fill[2]; continue; }
            const int32_t t = wa_pixel3(base, rs, H, W, kind, ixs[k], iys[k], dxs[k], dys[k]);
            /* four bytes (one store) but at the row's last pixel: the fourth is the next pixel's, written after */
            if (x + k < W - 1) memcpy(ok, &t, 4);
            else memcpy(ok, &t, 3);
        }
    }
    for (; x < W; x++) {
        double xx = ax0[x] + by + a[2];
        double yy = ax3[x] + ey + a[5];
        uint8_t *ok = o + (size_t)x * 3;
        if (xx < 0.0 || xx >= W || yy < 0.0 || yy >= H) { ok[0] = fill[0]; ok[1] = fill[1]; ok[2] = fill[2]; continue; }
        xx -= 0.5;
        yy -= 0.5;
        int ix = xx < 0.0 ? (int)floor(xx) : (int)xx, iy = yy < 0.0 ? (int)floor(yy) : (int)yy;
        const int32_t t = wa_pixel3(base, rs, H, W, kind, ix, iy, xx - ix, yy - iy);
        memcpy(ok, &t, 3);
    }
}
#endif

/* warp_affine(src_hwc_u8, matrix, kind, fill) -> bytearray (H, W, C): Pillow's Image.transform(size, AFFINE, matrix,
 * resample, fillcolor=fill) of a uint8 HWC image (C = 1 or 3, packed pixels in each row) to its own size, byte for byte:
 * Geometry.c's generic transform (affine_transform and the bilinear / bicubic filters), each output pixel's source
 * point computed once (the same products and sums) and its taps shared by the channels. kind 0 bilinear, 1 bicubic; a
 * point outside the image keeps `fill` (a C-tuple of 0-255). The auto-augment ops' shears, translations and rotations
 * at the crop's size (nbs/12_auto_augment.ipynb). */
static PyObject *warp_affine(PyObject *self, PyObject *args) {
    PyObject *src, *fillo;
    double a[6];
    int kind;
    if (!PyArg_ParseTuple(args, "O(dddddd)iO", &src, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &kind, &fillo)) return NULL;
    if (kind != 0 && kind != 1) { PyErr_SetString(PyExc_ValueError, "warp_affine: kind must be 0 (bilinear) or 1 (bicubic)"); return NULL; }
    Py_buffer v;
    if (PyObject_GetBuffer(src, &v, PyBUF_STRIDES) < 0) return NULL;
    PyObject *out = NULL;
    double *ax = NULL;
    uint8_t *packed = NULL, fill[3] = {0, 0, 0};
    if (v.ndim != 3 || v.itemsize != 1 || (v.shape[2] != 1 && v.shape[2] != 3) || v.strides[2] != 1 || v.strides[1] != v.shape[2]
        || v.strides[0] < v.shape[1] * v.shape[2] || v.shape[0] < 1 || v.shape[1] < 1
        || v.shape[0] > INT_MAX / 4 || v.shape[1] > INT_MAX / 4) {  /* the sizes aug_image_ok allows: int arithmetic */
        PyErr_SetString(PyExc_ValueError, "warp_affine: src must be uint8 HWC (C = 1 or 3) with packed pixels in each row, "
                        "each side below 2**29 pixels");
        goto done;
    }
    const int H = (int)v.shape[0], W = (int)v.shape[1], C = (int)v.shape[2];
    const Py_ssize_t rs = v.strides[0];
    if (!PyTuple_Check(fillo) || PyTuple_GET_SIZE(fillo) != C) {
        PyErr_Format(PyExc_ValueError, "warp_affine: fill must be a tuple of %d values 0-255", C);
        goto done;
    }
    for (int c = 0; c < C; c++) {
        long f = PyLong_AsLong(PyTuple_GET_ITEM(fillo, c));
        if (f == -1 && PyErr_Occurred()) goto done;
        if (f < 0 || f > 255) { PyErr_SetString(PyExc_ValueError, "warp_affine: fill values must be 0-255"); goto done; }
        fill[c] = (uint8_t)f;
    }
    ax = (double *)malloc(sizeof(double) * 2 * (size_t)W);
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)H * W * C);
    if (!ax || !out) { Py_CLEAR(out); PyErr_NoMemory(); goto done; }
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out);
    const uint8_t *base = (const uint8_t *)v.buf;
    const int simd = C == 3 && rs_avx2();
    if (simd && !(packed = (uint8_t *)malloc((size_t)H * W * 3 + 1))) { Py_CLEAR(out); PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    for (int x = 0; x < W; x++) {  /* the products Pillow computes per pixel: the same values, once per column */
        ax[x] = a[0] * (x + 0.5);
        ax[W + x] = a[3] * (x + 0.5);
    }
#if RS_AVX2
    if (simd) {  /* packed rows and a byte of slack: each tap loads 4 bytes */
        for (int y = 0; y < H; y++) memcpy(packed + (size_t)y * W * 3, base + (size_t)y * rs, (size_t)W * 3);
        packed[(size_t)H * W * 3] = 0;
        for (int y = 0; y < H; y++) wa_row3_avx2(packed, (Py_ssize_t)W * 3, H, W, a, ax, ax + W, y, kind, fill, dst + (size_t)y * W * 3);
    } else
#endif
    for (int y = 0; y < H; y++) {
        if (C == 3) wa_row(base, rs, H, W, 3, a, ax, ax + W, y, kind, fill, dst + (size_t)y * W * 3);
        else wa_row(base, rs, H, W, 1, a, ax, ax + W, y, kind, fill, dst + (size_t)y * W);
    }
    Py_END_ALLOW_THREADS
done:
    free(packed);
    free(ax);
    PyBuffer_Release(&v);
    return out;
}

/* ---- The auto-augment ops on uint8 HWC images, with Pillow's arithmetic (nbs/12_auto_augment.ipynb) ----
 * Each takes a uint8 HWC image (C = 1 or 3, packed pixels in each row) and returns a new packed one as a bytearray,
 * the bytes Pillow 13 gives for the same op on the same image (tests/test_augment_ops_parity.py compares them over
 * random images and parameters). The pixel work runs without the GIL. */

/* 1 when `v` is such an image, else 0 with ValueError set naming `name` */
static int aug_image_ok(const Py_buffer *v, const char *name) {
    if (v->ndim != 3 || v->itemsize != 1 || (v->shape[2] != 1 && v->shape[2] != 3) || v->strides[2] != 1
        || v->strides[1] != v->shape[2] || v->strides[0] < v->shape[1] * v->shape[2] || v->shape[0] < 1 || v->shape[1] < 1
        || v->shape[0] > INT_MAX / 4 || v->shape[1] > INT_MAX / 4) {
        PyErr_Format(PyExc_ValueError, "%s: the image must be uint8 HWC (C = 1 or 3) with packed pixels in each row", name);
        return 0;
    }
    return 1;
}

/* Per channel histograms (h[c * 256 + value]) */
static void aug_histogram(const uint8_t *base, Py_ssize_t rs, int H, int W, int C, uint64_t *h) {
    memset(h, 0, sizeof(uint64_t) * 256 * C);
    for (int y = 0; y < H; y++) {
        const uint8_t *p = base + (size_t)y * rs;
        if (C == 1) for (int x = 0; x < W; x++) h[p[x]]++;
        else for (int x = 0; x < W; x++, p += 3) { h[p[0]]++; h[256 + p[1]]++; h[512 + p[2]]++; }
    }
}

#if RS_AVX2
/* One 256-byte table over n bytes with AVX-512 VBMI: a byte's low seven bits pick from two 128-byte halves of the
 * table (vpermi2b), its high bit which half; the same bytes as the table read one by one */
#define AUG_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
static AUG_VBMI void aug_lut_vbmi(const uint8_t *p, uint8_t *o, Py_ssize_t n, const uint8_t *lut) {
    const __m512i t0 = _mm512_loadu_si512(lut), t1 = _mm512_loadu_si512(lut + 64);
    const __m512i t2 = _mm512_loadu_si512(lut + 128), t3 = _mm512_loadu_si512(lut + 192);
    Py_ssize_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i x = _mm512_loadu_si512(p + i);
        const __m512i lo = _mm512_permutex2var_epi8(t0, x, t1), hi = _mm512_permutex2var_epi8(t2, x, t3);
        _mm512_storeu_si512(o + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi));
    }
    for (; i < n; i++) o[i] = lut[p[i]];
}
/* Three tables, one per channel of interleaved RGB bytes (autocontrast's, equalize's): each 64 bytes looked up in all
 * three, each byte taking its channel's (the channel of byte j of a row is j % 3) */
static AUG_VBMI __m512i aug_lut_vec(__m512i x, const __m512i *t) {
    const __m512i lo = _mm512_permutex2var_epi8(t[0], x, t[1]), hi = _mm512_permutex2var_epi8(t[2], x, t[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi);
}
static AUG_VBMI void aug_lut3_vbmi(const uint8_t *p, uint8_t *o, Py_ssize_t n, const uint8_t *lut) {
    __m512i t[3][4];
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 4; k++) t[c][k] = _mm512_loadu_si512(lut + 256 * c + 64 * k);
    /* the bytes j of a block of 64 with j % 3 == k; in a block starting at a byte of channel r, channel c's are k = c - r */
    static const uint64_t every3[3] = {0x9249249249249249ULL, 0x2492492492492492ULL, 0x4924924924924924ULL};
    Py_ssize_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i x = _mm512_loadu_si512(p + i);
        const int r = (int)(i % 3);
        __m512i v = aug_lut_vec(x, t[0]);
        v = _mm512_mask_blend_epi8((__mmask64)every3[(4 - r) % 3], v, aug_lut_vec(x, t[1]));
        v = _mm512_mask_blend_epi8((__mmask64)every3[(5 - r) % 3], v, aug_lut_vec(x, t[2]));
        _mm512_storeu_si512(o + i, v);
    }
    for (; i < n; i++) o[i] = lut[256 * (i % 3) + p[i]];
}
static int aug_cpu_vbmi = -1;  /* the CPU has AVX-512 VBMI (asked once) */
#endif

static void aug_apply_lut(const uint8_t *base, Py_ssize_t rs, int H, int W, int C, const uint8_t *lut, uint8_t *dst) {
#if RS_AVX2
    /* rows of bytes through the table (the pointwise ops: one for every channel) or the channels' three, 64 at a time */
    if (aug_cpu_vbmi < 0) { __builtin_cpu_init(); aug_cpu_vbmi = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw"); }
    if (aug_cpu_vbmi && rs_avx2()) {
        const int one = C == 1 || (!memcmp(lut, lut + 256, 256) && !memcmp(lut, lut + 512, 256));
        for (int y = 0; y < H; y++)
            (one ? aug_lut_vbmi : aug_lut3_vbmi)(base + (size_t)y * rs, dst + (size_t)y * W * C, (Py_ssize_t)W * C, lut);
        return;
    }
#endif
    for (int y = 0; y < H; y++) {
        const uint8_t *p = base + (size_t)y * rs;
        uint8_t *o = dst + (size_t)y * W * C;
        if (C == 1) for (int x = 0; x < W; x++) o[x] = lut[p[x]];
        else for (int x = 0; x < W; x++, p += 3, o += 3) { o[0] = lut[p[0]]; o[1] = lut[256 + p[1]]; o[2] = lut[512 + p[2]]; }
    }
}

/* ImageOps.autocontrast (no cutoff): per channel, the lowest and highest values present stretched to 0 and 255 in
 * double arithmetic, truncated, clipped; a channel of one value kept */
static void aug_autocontrast_lut(const uint64_t *h, uint8_t *lut) {
    int lo = 0, hi = 255;
    while (lo < 256 && !h[lo]) lo++;
    while (hi >= 0 && !h[hi]) hi--;
    if (lo == 256) lo = 255;  /* an empty histogram: Python's loop ends with lo 255, hi 0 */
    if (hi < 0) hi = 0;
    if (hi <= lo) { for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i; return; }
    const double scale = 255.0 / (hi - lo), offset = -lo * scale;
    for (int i = 0; i < 256; i++) {
        int v = (int)(i * scale + offset);
        lut[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* ImageOps.equalize: integer steps of the cumulative histogram without its last present value; values past 255
 * clipped, as Image.point clips its table */
static void aug_equalize_lut(const uint64_t *h, uint8_t *lut) {
    uint64_t total = 0, last = 0;
    int present = 0;
    for (int i = 0; i < 256; i++) if (h[i]) { present++; total += h[i]; last = h[i]; }
    const uint64_t step = present <= 1 ? 0 : (total - last) / 255;
    if (!step) { for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i; return; }
    uint64_t n = step / 2;
    for (int i = 0; i < 256; i++) {
        const uint64_t v = n / step;
        lut[i] = (uint8_t)(v > 255 ? 255 : v);
        n += h[i];
    }
}

/* aug_point(src, kind, lut) -> bytearray: kind 0 the table `lut` (256 values for every channel or 256 per channel,
 * as Image.point), 1 ImageOps.autocontrast, 2 ImageOps.equalize (tables from the image's histograms) */
static PyObject *aug_point(PyObject *self, PyObject *args) {
    PyObject *src;
    int kind;
    Py_buffer lt = {0};
    if (!PyArg_ParseTuple(args, "Oi|y*", &src, &kind, &lt)) return NULL;
    Py_buffer v;
    PyObject *out = NULL;
    if (PyObject_GetBuffer(src, &v, PyBUF_STRIDES) < 0) { if (lt.obj) PyBuffer_Release(&lt); return NULL; }
    if (!aug_image_ok(&v, "aug_point")) goto done;
    const int H = (int)v.shape[0], W = (int)v.shape[1], C = (int)v.shape[2];
    uint8_t lut[768];
    if (kind == 0) {
        if (!lt.obj || (lt.len != 256 && lt.len != 256 * C)) {
            PyErr_Format(PyExc_ValueError, "aug_point: kind 0 needs a table of 256 or %d bytes", 256 * C);
            goto done;
        }
        for (int c = 0; c < C; c++) memcpy(lut + 256 * c, (const uint8_t *)lt.buf + (lt.len == 256 ? 0 : 256 * c), 256);
    } else if (kind != 1 && kind != 2) {
        PyErr_SetString(PyExc_ValueError, "aug_point: kind must be 0 (table), 1 (autocontrast) or 2 (equalize)");
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)H * W * C);
    if (!out) goto done;
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    if (kind != 0) {
        uint64_t h[768];
        aug_histogram((const uint8_t *)v.buf, v.strides[0], H, W, C, h);
        for (int c = 0; c < C; c++) (kind == 1 ? aug_autocontrast_lut : aug_equalize_lut)(h + 256 * c, lut + 256 * c);
    }
    aug_apply_lut((const uint8_t *)v.buf, v.strides[0], H, W, C, lut, dst);
    Py_END_ALLOW_THREADS
done:
    if (lt.obj) PyBuffer_Release(&lt);
    PyBuffer_Release(&v);
    return out;
}

/* Pillow's grey: ITU-R 601-2 luma in 16-bit fixed point, rounded (Convert.c's RGB to L) */
static inline uint8_t aug_luma(const uint8_t *p) { return (uint8_t)((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16); }

/* A row's luma sum (C 3), or its values' (C 1) */
static HOT uint64_t aug_luma_sum(const uint8_t *restrict p, Py_ssize_t W, int C) {
    uint64_t sum = 0;
    if (C == 1) for (Py_ssize_t x = 0; x < W; x++) sum += p[x];
    else for (Py_ssize_t x = 0; x < W; x++) sum += aug_luma(p + 3 * x);
    return sum;
}

/* A row's luma as RGB (Pillow's convert('L').convert('RGB')) */
static HOT void aug_luma_rgb(const uint8_t *restrict p, uint8_t *restrict o, Py_ssize_t W) {
    for (Py_ssize_t x = 0; x < W; x++) o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = aug_luma(p + 3 * x);
}

/* ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1 over 13) as Filter.c computes it on 8 bits: float weights (the
 * integers divided by 13 in float), a float sum from 0.5 row by row (the row below first), clamped and truncated; the
 * border rows and columns copied. Images under 3 pixels a side are copied whole. Each row's products with the weights
 * are computed once (the same floats for the three output rows that use them); `f` has room for 4 rows of W * C. */
static HOT void aug_smooth(const uint8_t *base, Py_ssize_t rs, int H, int W, int C, uint8_t *dst, float *f) {
    /* indices are Py_ssize_t: Python builds with -fwrapv, under which int index arithmetic does not vectorise */
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const Py_ssize_t n = (Py_ssize_t)W * C, c = C;
    for (int y = 0; y < H; y++) memcpy(dst + (size_t)y * n, base + (size_t)y * rs, n);
    if (H < 3 || W < 3) return;
    float *rows[3] = {f, f + n, f + 2 * n}, *mid5 = f + 3 * n;
    for (int r = 0; r < 2; r++) {
        const uint8_t *p = base + (size_t)r * rs;
        for (Py_ssize_t i = 0; i < n; i++) rows[r][i] = (float)p[i] * k1;
    }
    for (int y = 1; y < H - 1; y++) {
        float *restrict up = rows[(y - 1) % 3], *restrict mid = rows[y % 3], *restrict dn = rows[(y + 1) % 3];
        float *restrict m5 = mid5;
        const uint8_t *restrict pm = base + (size_t)y * rs, *restrict pd = base + (size_t)(y + 1) * rs;
        for (Py_ssize_t i = 0; i < n; i++) dn[i] = (float)pd[i] * k1;
        for (Py_ssize_t i = 0; i < n; i++) m5[i] = (float)pm[i] * k5;
        uint8_t *restrict o = dst + (size_t)y * n;
        for (Py_ssize_t i = c; i < n - c; i++) {
            float ss = 0.5f;
            ss += (dn[i - c] + dn[i]) + dn[i + c];
            ss += (mid[i - c] + m5[i]) + mid[i + c];
            ss += (up[i - c] + up[i]) + up[i + c];
            ss = ss < 0.0f ? 0.0f : ss;
            ss = ss > 255.0f ? 255.0f : ss;
            o[i] = (uint8_t)ss;
        }
    }
}

/* Image.blend(deg, img, alpha) on 8 bits (Blend.c): alpha 0 and 1 copy; within 0..1 the float deg + alpha * (img -
 * deg) truncated; outside it, the same clamped to 0..255 first. `deg` is an image (deg_stride 1) or one value */
static HOT void aug_blend(const uint8_t *deg, int deg_stride, const uint8_t *img, Py_ssize_t rs, int H, int W, int C, float alpha,
                      uint8_t *dst) {
    const size_t n = (size_t)W * C;
    for (int y = 0; y < H; y++) {
        const uint8_t *s = img + (size_t)y * rs, *d = deg_stride ? deg + y * n : deg;
        uint8_t *o = dst + y * n;
        if (alpha == 1.0f) { memcpy(o, s, n); continue; }
        if (alpha == 0.0f) { if (deg_stride) memcpy(o, d, n); else memset(o, d[0], n); continue; }
        if (alpha >= 0 && alpha <= 1.0) {
            if (deg_stride) for (size_t i = 0; i < n; i++) o[i] = (uint8_t)((int)d[i] + alpha * ((int)s[i] - (int)d[i]));
            else for (size_t i = 0; i < n; i++) o[i] = (uint8_t)((int)d[0] + alpha * ((int)s[i] - (int)d[0]));
        } else {
            /* t <= 0 gives 0 and t >= 255 gives 255 either way: clamping first lets the loop vectorise */
            if (deg_stride) for (size_t i = 0; i < n; i++) {
                float t = (float)((int)d[i] + alpha * ((int)s[i] - (int)d[i]));
                t = t < 0.0f ? 0.0f : t;
                t = t > 255.0f ? 255.0f : t;
                o[i] = (uint8_t)t;
            } else for (size_t i = 0; i < n; i++) {
                float t = (float)((int)d[0] + alpha * ((int)s[i] - (int)d[0]));
                t = t < 0.0f ? 0.0f : t;
                t = t > 255.0f ? 255.0f : t;
                o[i] = (uint8_t)t;
            }
        }
    }
}

/* aug_enhance(src, kind, factor) -> bytearray: ImageEnhance's enhance(factor), Image.blend(degenerate, image, factor)
 * with degenerate: kind 0 Brightness (black), 1 Contrast (the grey of the rounded mean luma), 2 Color (the image's luma;
 * an 'L' image is its own), 3 Sharpness (ImageFilter.SMOOTH of the image) */
static PyObject *aug_enhance(PyObject *self, PyObject *args) {
    PyObject *src;
    int kind;
    double factor;
    if (!PyArg_ParseTuple(args, "Oid", &src, &kind, &factor)) return NULL;
    if (kind < 0 || kind > 3) { PyErr_SetString(PyExc_ValueError, "aug_enhance: kind must be 0 (brightness), 1 (contrast), 2 (color) or 3 (sharpness)"); return NULL; }
    Py_buffer v;
    if (PyObject_GetBuffer(src, &v, PyBUF_STRIDES) < 0) return NULL;
    PyObject *out = NULL;
    uint8_t *deg = NULL;
    if (!aug_image_ok(&v, "aug_enhance")) goto done;
    const int H = (int)v.shape[0], W = (int)v.shape[1], C = (int)v.shape[2];
    const Py_ssize_t rs = v.strides[0];
    const uint8_t *base = (const uint8_t *)v.buf;
    if (kind >= 2 && !(kind == 2 && C == 1)) {
        deg = (uint8_t *)malloc((size_t)H * W * C + (kind == 3 ? 16 + sizeof(float) * 4 * (size_t)W * C : 0));
        if (!deg) { PyErr_NoMemory(); goto done; }
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)H * W * C);
    if (!out) goto done;
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out);
    const float alpha = (float)factor;
    Py_BEGIN_ALLOW_THREADS
    uint8_t level = 0;
    if (kind == 0) {
        aug_blend(&level, 0, base, rs, H, W, C, alpha, dst);
    } else if (kind == 1) {
        uint64_t sum = 0;
        for (int y = 0; y < H; y++) sum += aug_luma_sum(base + (size_t)y * rs, W, C);
        level = (uint8_t)(int)((double)sum / ((double)H * W) + 0.5);
        aug_blend(&level, 0, base, rs, H, W, C, alpha, dst);
    } else if (kind == 2 && C == 1) {  /* Pillow blends the image with itself: a copy */
        aug_blend(base, 0, base, rs, H, W, C, 1.0f, dst);
    } else if (kind == 2) {
        for (int y = 0; y < H; y++) aug_luma_rgb(base + (size_t)y * rs, deg + (size_t)y * W * 3, W);
        aug_blend(deg, 1, base, rs, H, W, C, alpha, dst);
    } else {
        aug_smooth(base, rs, H, W, C, deg, (float *)(deg + (((size_t)H * W * C + 15) & ~(size_t)15)));
        aug_blend(deg, 1, base, rs, H, W, C, alpha, dst);
    }
    Py_END_ALLOW_THREADS
done:
    free(deg);
    PyBuffer_Release(&v);
    return out;
}

/* BoxBlur.c's box blur along the first axis of an n x m array (m lines side by side, each blurred as Pillow blurs a
 * line): a running sum over 2r + 1 values and the two next ones weighted by the radius's fraction, in 8.24 fixed point
 * (ww, fw), the ends extended; `passes` times, from `src` into `dst` through `tmp` (each n * m). All m lines move
 * together, so the arithmetic vectorises across them. */
static HOT void aug_box_axis(const uint8_t *src, uint8_t *dst, uint8_t *tmp, int n, size_t m, float fr, int passes, uint32_t *acc) {
    /* 64-bit: a radius up to Pillow's bound (2**31) never overflows an index; the sums Pillow makes in int wrap modulo
     * 2**32 into its unsigned accumulators, as the casts below do */
    const int64_t radius = (int64_t)fr;
    const uint32_t ww = (uint32_t)((uint32_t)(1 << 24) / (fr * 2 + 1));
    const uint32_t fw = (uint32_t)((1u << 24) - (uint32_t)(radius * 2 + 1) * ww) / 2;
    const int lastx = n - 1, edgeA = radius + 1 < n ? (int)(radius + 1) : n;
    const int edgeB = n - radius - 1 > 0 ? (int)(n - radius - 1) : 0;
    for (int pass = 0; pass < passes; pass++) {
        const uint8_t *in = pass == 0 ? src : ((passes - pass) % 2 ? tmp : dst);
        uint8_t *out = (passes - 1 - pass) % 2 ? tmp : dst;  /* the last pass writes dst */
#define AB_ROW(i) (in + (size_t)(i) * m)
        for (size_t j = 0; j < m; j++) acc[j] = (uint32_t)(AB_ROW(0)[j] * (radius + 1));
        for (int x = 0; x < edgeA - 1; x++) { const uint8_t *r = AB_ROW(x); for (size_t j = 0; j < m; j++) acc[j] += r[j]; }
        { const uint8_t *r = AB_ROW(lastx); for (size_t j = 0; j < m; j++) acc[j] += (uint32_t)(r[j] * (radius - edgeA + 1)); }
#define AB_STEP(x, sub, add, l, r) do { \
            const uint8_t *ps = AB_ROW(sub), *pa = AB_ROW(add), *pl = AB_ROW(l), *pr = AB_ROW(r); \
            uint8_t *po = out + (size_t)(x) * m; \
            for (size_t j = 0; j < m; j++) { \
                acc[j] += (uint32_t)((int)pa[j] - (int)ps[j]); \
                po[j] = (uint8_t)((acc[j] * ww + (uint32_t)((int)pl[j] + (int)pr[j]) * fw + (1u << 23)) >> 24); \
            } } while (0)
        int x;
        if (edgeA <= edgeB) {
            for (x = 0; x < edgeA; x++) AB_STEP(x, 0, x + radius, 0, x + radius + 1);
            for (x = edgeA; x < edgeB; x++) AB_STEP(x, x - radius - 1, x + radius, x - radius - 1, x + radius + 1);
            for (x = edgeB; x <= lastx; x++) AB_STEP(x, x - radius - 1, lastx, x - radius - 1, lastx);
        } else {
            for (x = 0; x < edgeB; x++) AB_STEP(x, 0, x + radius, 0, x + radius + 1);
            for (x = edgeB; x < edgeA; x++) AB_STEP(x, 0, lastx, 0, lastx);
            for (x = edgeA; x <= lastx; x++) AB_STEP(x, x - radius - 1, lastx, x - radius - 1, lastx);
        }
#undef AB_STEP
#undef AB_ROW
    }
}

/* (H, W, C) -> (W, H, C) */
static void aug_transpose(const uint8_t *src, Py_ssize_t rs, int H, int W, int C, uint8_t *dst) {
    for (int y = 0; y < H; y++) {
        const uint8_t *p = src + (size_t)y * rs;
        if (C == 3) for (int x = 0; x < W; x++) memcpy(dst + ((size_t)x * H + y) * 3, p + x * 3, 3);
        else for (int x = 0; x < W; x++) dst[(size_t)x * H + y] = p[x];
    }
}

/* ImageFilter.GaussianBlur(radius) (BoxBlur.c): three box blurs of a radius derived from the Gaussian's in float (the
 * mix of float and double steps as Pillow's), along the rows, then three along the columns */
static float aug_box_radius(float radius, int passes) {
    float sigma2, L, l, a;
    sigma2 = radius * radius / passes;
    L = sqrt(12.0 * sigma2 + 1.0);
    l = floor((L - 1.0) / 2.0);
    a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
    a /= 6 * (sigma2 - (l + 1) * (l + 1));
    return l + a;
}

/* aug_gaussian_blur(src, radius) -> bytearray: ImageFilter.GaussianBlur(radius) (a C float, as Pillow reads it) */
static PyObject *aug_gaussian_blur(PyObject *self, PyObject *args) {
    PyObject *src;
    float radius;
    if (!PyArg_ParseTuple(args, "Of", &src, &radius)) return NULL;
    if (!(radius >= 0)) { PyErr_SetString(PyExc_ValueError, "aug_gaussian_blur: radius must be >= 0"); return NULL; }
    /* the box blur's radius (Pillow's from the Gaussian's, in float) below 2**31, as Pillow bounds it ("radius too
     * large"): a larger one, infinity or NaN is refused */
    const float fr_checked = radius == 0 ? 0.0f : aug_box_radius(radius, 3);
    if (!(fr_checked >= 0 && fr_checked < (float)INT_MAX)) {
        PyObject *r = PyFloat_FromDouble((double)radius);
        if (r) PyErr_Format(PyExc_ValueError, "aug_gaussian_blur: radius %R too large (its box blur's radius must be "
                            "below 2**31, as Pillow's)", r);
        Py_XDECREF(r);
        return NULL;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(src, &v, PyBUF_STRIDES) < 0) return NULL;
    PyObject *out = NULL;
    uint8_t *tmp = NULL;
    if (!aug_image_ok(&v, "aug_gaussian_blur")) goto done;
    const int H = (int)v.shape[0], W = (int)v.shape[1], C = (int)v.shape[2];
    const size_t ds = (size_t)W * C, N = (size_t)H * W * C;
    tmp = (uint8_t *)malloc(2 * N + sizeof(uint32_t) * (N / (H < W ? H : W) + 1) + 16);
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)N);
    if (!tmp || !out) { Py_CLEAR(out); PyErr_NoMemory(); goto done; }
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out);
    uint32_t *acc = (uint32_t *)(tmp + ((2 * N + 15) & ~(size_t)15));
    Py_BEGIN_ALLOW_THREADS
    const float fr = fr_checked;
    if (fr == 0) {
        for (int y = 0; y < H; y++) memcpy(dst + y * ds, (const uint8_t *)v.buf + (size_t)y * v.strides[0], ds);
    } else {  /* along the rows (on the transposed image), then along the columns, as Pillow */
        aug_transpose((const uint8_t *)v.buf, v.strides[0], H, W, C, tmp);
        aug_box_axis(tmp, tmp + N, tmp, W, (size_t)H * C, fr, 3, acc);  /* the source is not read after the first pass */
        aug_transpose(tmp + N, (Py_ssize_t)H * C, W, H, C, tmp);
        aug_box_axis(tmp, dst, tmp + N, H, ds, fr, 3, acc);
    }
    Py_END_ALLOW_THREADS
done:
    free(tmp);
    PyBuffer_Release(&v);
    return out;
}

/* Two same-shape images of aug_image_ok, or 0 with ValueError set */
static int aug_pair_ok(const Py_buffer *a, const Py_buffer *b, const char *name) {
    if (!aug_image_ok(a, name) || !aug_image_ok(b, name)) return 0;
    if (a->shape[0] != b->shape[0] || a->shape[1] != b->shape[1] || a->shape[2] != b->shape[2]) {
        PyErr_Format(PyExc_ValueError, "%s: the images must have the same shape", name);
        return 0;
    }
    return 1;
}

/* aug_blend(a, b, alpha) -> bytearray: Image.blend(a, b, alpha) of two uint8 HWC images (alpha read as a C float) */
static PyObject *aug_blend_images(PyObject *self, PyObject *args) {
    PyObject *ao, *bo;
    double alpha;
    if (!PyArg_ParseTuple(args, "OOd", &ao, &bo, &alpha)) return NULL;
    Py_buffer a, b;
    if (PyObject_GetBuffer(ao, &a, PyBUF_STRIDES) < 0) return NULL;
    if (PyObject_GetBuffer(bo, &b, PyBUF_STRIDES) < 0) { PyBuffer_Release(&a); return NULL; }
    PyObject *out = NULL;
    uint8_t *packed = NULL;
    if (!aug_pair_ok(&a, &b, "aug_blend")) goto done;
    const int H = (int)a.shape[0], W = (int)a.shape[1], C = (int)a.shape[2];
    const size_t n = (size_t)W * C;
    packed = (uint8_t *)malloc((size_t)H * n);
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(H * n));
    if (!packed || !out) { Py_CLEAR(out); PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    for (int y = 0; y < H; y++) memcpy(packed + y * n, (const uint8_t *)a.buf + (size_t)y * a.strides[0], n);
    aug_blend(packed, 1, (const uint8_t *)b.buf, b.strides[0], H, W, C, (float)alpha, (uint8_t *)PyByteArray_AS_STRING(out));
    Py_END_ALLOW_THREADS
done:
    free(packed);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return out;
}

/* mix[i] += w * (float)x[i] over a row: numpy's float32 `mix += w * x.astype(float32)`, one rounding per operation */
static HOT void aug_mix_row(float *mix, const uint8_t *x, size_t n, float w) {
    for (size_t i = 0; i < n; i++) mix[i] = mix[i] + w * (float)x[i];
}

/* aug_mix(img, chains, weights, m) -> bytearray: AugMix's mixing (timm's arithmetic): the float32 sum of weights[k] *
 * chains[k] from 0, clipped to 0..255 and truncated to uint8, then Image.blend(img, that, m); weights and m as float32
 * values (each a Python float holding one) */
static PyObject *aug_mix(PyObject *self, PyObject *args) {
    PyObject *io, *chains, *weights;
    double m;
    if (!PyArg_ParseTuple(args, "OO!O!d", &io, &PyList_Type, &chains, &PyList_Type, &weights, &m)) return NULL;
    const Py_ssize_t K = PyList_GET_SIZE(chains);
    if (K < 1 || PyList_GET_SIZE(weights) != K) { PyErr_SetString(PyExc_ValueError, "aug_mix: needs one weight per chain, and a chain"); return NULL; }
    Py_buffer im;
    if (PyObject_GetBuffer(io, &im, PyBUF_STRIDES) < 0) return NULL;
    Py_buffer *cb = (Py_buffer *)calloc((size_t)K, sizeof(Py_buffer));
    float *w = (float *)malloc(sizeof(float) * (size_t)K), *mix = NULL;
    uint8_t *mixed = NULL;
    PyObject *out = NULL;
    Py_ssize_t got = 0;
    if (!cb || !w) { PyErr_NoMemory(); goto done; }
    if (!aug_image_ok(&im, "aug_mix")) goto done;
    for (; got < K; got++) {
        double wk = PyFloat_AsDouble(PyList_GET_ITEM(weights, got));
        if (wk == -1.0 && PyErr_Occurred()) goto done;
        w[got] = (float)wk;
        if (PyObject_GetBuffer(PyList_GET_ITEM(chains, got), &cb[got], PyBUF_STRIDES) < 0) goto done;
        if (!aug_pair_ok(&im, &cb[got], "aug_mix")) { got++; goto done; }
    }
    const int H = (int)im.shape[0], W = (int)im.shape[1], C = (int)im.shape[2];
    const size_t n = (size_t)W * C;
    mix = (float *)malloc(sizeof(float) * n);
    mixed = (uint8_t *)malloc(2 * (size_t)H * n);  /* the mix, then a packed copy of img (Image.blend's first image) */
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(H * n));
    if (!mix || !mixed || !out) { Py_CLEAR(out); PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    uint8_t *first = mixed + (size_t)H * n;
    for (int y = 0; y < H; y++) {
        memset(mix, 0, sizeof(float) * n);
        for (Py_ssize_t k = 0; k < K; k++) aug_mix_row(mix, (const uint8_t *)cb[k].buf + (size_t)y * cb[k].strides[0], n, w[k]);
        uint8_t *o = mixed + y * n;
        for (size_t i = 0; i < n; i++) {
            float t = mix[i] < 0.0f ? 0.0f : mix[i];
            o[i] = (uint8_t)(t > 255.0f ? 255.0f : t);
        }
        memcpy(first + y * n, (const uint8_t *)im.buf + (size_t)y * im.strides[0], n);
    }
    aug_blend(first, 1, mixed, (Py_ssize_t)n, H, W, C, (float)m, (uint8_t *)PyByteArray_AS_STRING(out));
    Py_END_ALLOW_THREADS
done:
    for (Py_ssize_t k = 0; k < got; k++) PyBuffer_Release(&cb[k]);
    free(cb);
    free(w);
    free(mix);
    free(mixed);
    PyBuffer_Release(&im);
    return out;
}

/* Three planes' bytes interleaved (the compiler vectorises the shuffles where the CPU has them) */
static HOT void interleave3(const uint8_t *restrict r, const uint8_t *restrict g, const uint8_t *restrict b, uint8_t *restrict o, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) { o[3 * i] = r[i]; o[3 * i + 1] = g[i]; o[3 * i + 2] = b[i]; }
}

/* planar_to_hwc(src_chw_u8) -> bytearray (H, W, C): a C-contiguous (C, H, W) uint8 image's pixels interleaved */
static PyObject *planar_to_hwc(PyObject *self, PyObject *args) {
    PyObject *src;
    if (!PyArg_ParseTuple(args, "O", &src)) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(src, &v, PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0) return NULL;
    PyObject *out = NULL;
    if (v.ndim != 3 || v.itemsize != 1 || v.shape[0] < 1 || v.shape[0] > 4) {
        PyErr_SetString(PyExc_ValueError, "planar_to_hwc: src must be a C-contiguous uint8 (C, H, W) image, C 1 to 4");
        goto done;
    }
    const Py_ssize_t C = v.shape[0], HW = v.shape[1] * v.shape[2];
    out = PyByteArray_FromStringAndSize(NULL, C * HW);
    if (!out) goto done;
    const uint8_t *p = (const uint8_t *)v.buf;
    uint8_t *o = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    if (C == 3) interleave3(p, p + HW, p + 2 * HW, o, HW);
    else for (Py_ssize_t i = 0; i < HW; i++) for (Py_ssize_t c = 0; c < C; c++) o[C * i + c] = p[c * HW + i];
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&v);
    return out;
}

/* hwc_to_planar(src_hwc_u8, out) -> None: a uint8 (H, W, C) image with packed pixels in each row (rows may be apart)
 * written planar into out, a writable C-contiguous buffer of C * H * W bytes (e.g. an image's row of a uint8 NCHW
 * batch): planar_to_hwc's inverse, one pass without the GIL */
static HOT void deinterleave3(const uint8_t *restrict s, uint8_t *restrict r, uint8_t *restrict g, uint8_t *restrict b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) { r[i] = s[3 * i]; g[i] = s[3 * i + 1]; b[i] = s[3 * i + 2]; }
}

static PyObject *hwc_to_planar(PyObject *self, PyObject *args) {
    PyObject *src; Py_buffer out;
    if (!PyArg_ParseTuple(args, "Ow*", &src, &out)) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(src, &v, PyBUF_STRIDES) < 0) { PyBuffer_Release(&out); return NULL; }
    PyObject *ret = NULL;
    if (v.ndim != 3 || v.itemsize != 1 || v.shape[2] < 1 || v.shape[2] > 4 || v.strides[2] != 1 || v.strides[1] != v.shape[2]
        || v.strides[0] < v.shape[1] * v.shape[2]) {
        PyErr_SetString(PyExc_ValueError, "hwc_to_planar: src must be a uint8 (H, W, C) image, C 1 to 4, with packed pixels in each row");
        goto done;
    }
    const Py_ssize_t H = v.shape[0], W = v.shape[1], C = v.shape[2], rs = v.strides[0];
    if (out.len != C * H * W) {
        PyErr_Format(PyExc_ValueError, "hwc_to_planar: out holds %zd bytes; a %zdx%zdx%zd image needs %zd", out.len, H, W, C, C * H * W);
        goto done;
    }
    const uint8_t *p = (const uint8_t *)v.buf;
    uint8_t *o = (uint8_t *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t HW = H * W;
    if (C == 3 && rs == 3 * W) deinterleave3(p, o, o + HW, o + 2 * HW, HW);
    else
        for (Py_ssize_t y = 0; y < H; y++)
            for (Py_ssize_t x = 0; x < W; x++)
                for (Py_ssize_t c = 0; c < C; c++) o[c * HW + y * W + x] = p[y * rs + x * C + c];
    Py_END_ALLOW_THREADS
    ret = Py_None; Py_INCREF(ret);
done:
    PyBuffer_Release(&v); PyBuffer_Release(&out);
    return ret;
}

static PyMethodDef methods[] = {
    {"set_streaming", set_streaming, METH_VARARGS, "set_streaming(on) -> previous setting: streaming stores in the affine passes (AVX2 builds)"},
    {"header", header, METH_VARARGS, "header(data) -> (height, width, components, jpeg colour space)"},
    {"decode_crop", decode_crop, METH_VARARGS, "decode_crop(data, top, left, height, width, max_pixels=0, gray=False) -> (bytearray RGB or gray, x0, y0, w, h)"},
    {"cmyk_to_rgb", cmyk_to_rgb, METH_VARARGS, "cmyk_to_rgb(data) -> bytes: libjpeg's CMYK samples in RGB, as Pillow converts a CMYK JPEG"},
    {"resample_window", resample_window, METH_VARARGS, "resample_window(src_hwc_u8, y0, x0, in_h, in_w, out_h, out_w, top, left, oh, ow, kind, vertical_first=False, flip=False) -> bytearray (C, oh, ow), planar: Pillow's resize (kind 0 bilinear, 1 bicubic) of the in_h x in_w image to out_h x out_w, rows top.. and columns left.. only (mirrored left to right with flip); src holds the source from (y0, x0)"},
    {"resize_crop_jpeg", (PyCFunction)(void (*)(void))resize_crop_jpeg, METH_VARARGS | METH_KEYWORDS, "resize_crop_jpeg(data, out_h, out_w, top, left, oh, ow, kind, vertical_first=False, max_pixels=0, box=None, flip=False, to_end=True) -> (bytearray (3, oh, ow) planar, warned): resample_window's result from the JPEG's RGB pixels (of the box (y, x, h, w): PIL's crop then resize), mirrored with flip, decoding only the rows and columns the window reads (with to_end, the file to its end)"},
    {"resize_crop_jpeg_batch", resize_crop_jpeg_batch, METH_VARARGS, "resize_crop_jpeg_batch(items, oh, ow, out, max_pixels=0) -> bytes of statuses (0 made, 1 made with a libjpeg warning, 2 not made): each item (data, box or None, (out_h, out_w, top, left), kind, vertical_first, flip, to_end) what resize_crop_jpeg makes of it (the window oh x ow), into image i of out, a uint8 (n, 3, oh, ow) buffer; one call, without the GIL"},
    {"resize_batch", resize_batch, METH_VARARGS, "resize_batch(items, oh, ow, out): each item (src_hwc_u8, kind, vertical_first, flip) resized whole to oh x ow (resample_window's, mirrored with flip) into image i of out, a uint8 (n, 3, oh, ow) buffer; one call, without the GIL"},
    {"set_resample_simd", set_resample_simd, METH_VARARGS, "set_resample_simd(on) -> previous setting: the AVX2 passes of resample_window, warp_affine's AVX2 RGB row and aug_point's AVX-512 VBMI tables (the same bytes as the plain C ones)"},
    {"jpeg_warnings", jpeg_warnings, METH_NOARGS, "jpeg_warnings() -> (images libjpeg warned about so far in this process, latest message)"},
    {"channel_means", channel_means, METH_VARARGS, "channel_means(x_u8, out_f32, n, c, hw): per image and channel means"},
    {"channel_means_nhwc", channel_means_nhwc, METH_VARARGS, "channel_means for a channels-last (n, hw, c) batch"},
    {"affine_u8_nhwc", affine_u8_nhwc, METH_VARARGS, "affine_u8 for a channels-last (n, hw, c) batch; planar (n, c, hw) output"},
    {"affine_u8_cl", affine_u8_cl, METH_VARARGS, "affine_u8_cl(x_u8, m, b, lo, hi, fill, valid_i64, out_f32, n, c, hw): channels-last in and out, fill past valid[i]"},
    {"flag_acquire", flag_acquire, METH_VARARGS, "flag_acquire(int32 flags, i) -> True when flag i went 0 -> 1 (atomic, acquire)"},
    {"flag_release", flag_release, METH_VARARGS, "flag_release(int32 flags, i): flag i = 0 (atomic, release)"},
    {"torch_first_rand", torch_first_rand, METH_O, "torch_first_rand(seed) -> float: torch.rand(1, generator=torch.Generator().manual_seed(seed)).item() for 0 <= seed < 2**64, without a generator"},
    {"warp_affine", warp_affine, METH_VARARGS, "warp_affine(src_hwc_u8, matrix, kind, fill) -> bytearray (H, W, C): Pillow's Image.transform(size, AFFINE, matrix, resample, fillcolor=fill) of the image, byte for byte (kind 0 bilinear, 1 bicubic)"},
    {"aug_point", aug_point, METH_VARARGS, "aug_point(src_hwc_u8, kind, table=None) -> bytearray (H, W, C): Image.point(table) (kind 0: 256 values for every channel or 256 per channel), ImageOps.autocontrast (1) or ImageOps.equalize (2) of the image, Pillow's bytes"},
    {"aug_enhance", aug_enhance, METH_VARARGS, "aug_enhance(src_hwc_u8, kind, factor) -> bytearray (H, W, C): ImageEnhance's Brightness (kind 0), Contrast (1), Color (2) or Sharpness (3) enhance(factor) of the image, Pillow's bytes"},
    {"aug_gaussian_blur", aug_gaussian_blur, METH_VARARGS, "aug_gaussian_blur(src_hwc_u8, radius) -> bytearray (H, W, C): ImageFilter.GaussianBlur(radius) of the image, Pillow's bytes"},
    {"aug_blend", aug_blend_images, METH_VARARGS, "aug_blend(a_hwc_u8, b_hwc_u8, alpha) -> bytearray (H, W, C): Image.blend(a, b, alpha), Pillow's bytes"},
    {"aug_mix", aug_mix, METH_VARARGS, "aug_mix(img_hwc_u8, chains, weights, m) -> bytearray (H, W, C): AugMix's mix: the float32 sum of weights[k] * chains[k], clipped and truncated to uint8, blended with img by m as Image.blend(img, mix, m)"},
    {"planar_to_hwc", planar_to_hwc, METH_VARARGS, "planar_to_hwc(src_chw_u8) -> bytearray (H, W, C): the planes' pixels interleaved"},
    {"hwc_to_planar", hwc_to_planar, METH_VARARGS, "hwc_to_planar(src_hwc_u8, out) -> None: the pixels written planar into out (C * H * W bytes)"},
    {"affine_u8", affine_u8, METH_VARARGS, "affine_u8(x_u8, m, b, lo, hi, out_f32, n, c, hw): out = clamp(m @ x + b, lo, hi)"},
    {NULL, NULL, 0, NULL}};
/* Multi-phase init (PEP 489). The module keeps no Python objects of its own: what it shares between calls is set once
 * here (the CPU's features, the per-thread scratch key), atomic (the streaming and SIMD switches, the ring flags), or
 * under warn_lock (libjpeg's warning count); every call's buffers are its own. So it runs without the GIL on a
 * free-threaded build (Py_mod_gil_not_used, Python 3.13+: importing it does not turn the GIL back on), and its
 * functions may run in many threads at once (tests/test_native_threads.py). */
static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_native", "Crop-aware JPEG decoding and the fused uint8 batch step", 0, methods,
                                    slots};
PyMODINIT_FUNC PyInit__native(void) {
    /* once per process, under the import lock, before any function can run */
    detect_cpu();
#if RS_AVX2
    rs_detect_cpu();
#endif
    rs_scratch_init();
    return PyModuleDef_Init(&moddef);
}
