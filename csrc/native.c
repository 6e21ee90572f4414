/* timmdata._native: the two hot spots that torch, torchvision and Pillow cannot do in one pass.
 *
 * 1. Decode only the part of a JPEG that a crop needs, with libjpeg-turbo (header, decode_crop).
 *
 * A random-resized crop keeps on average about half of an image. libjpeg-turbo can skip the inverse DCT,
 * upsampling and colour conversion of the rows above the crop (jpeg_skip_scanlines) and of the columns
 * outside it (jpeg_crop_scanline), and stop reading once past the crop's last row. The pixels inside the
 * decoded box are those of a full decode, provided the box has a few pixels of margin around the crop (the
 * chroma upsampling looks at neighbouring samples); the Python side adds that margin.
 * Explained, measured and tested in nbs/01_dataset.ipynb.
 *
 * 2. Turn a uint8 NCHW batch into the normalised, colour-jittered float batch in one pass (channel_means,
 * affine_u8): colour jitter and normalisation together are one 3x3 matrix and bias per image, and the torch ops
 * that express it (a float copy, a K=3 matrix product, clamps) take three times as long on the CPU.
 * Explained, measured and tested in nbs/07_loader.ipynb. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdint.h>
#include <jpeglib.h>

struct err_mgr { struct jpeg_error_mgr pub; jmp_buf jb; char msg[JMSG_LENGTH_MAX]; };

static void on_error(j_common_ptr c) {
    struct err_mgr *e = (struct err_mgr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}
static void on_message(j_common_ptr c, int level) { (void)c; (void)level; } /* warnings: the Python side checks structure */

/* header(data) -> (height, width, components, colour space code of libjpeg's J_COLOR_SPACE) */
static PyObject *header(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    struct jpeg_decompress_struct cinfo;
    struct err_mgr jerr;
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = on_error; jerr.pub.emit_message = on_message;
    if (setjmp(jerr.jb)) {
        jpeg_destroy_decompress(&cinfo); PyBuffer_Release(&buf);
        PyErr_Format(PyExc_ValueError, "JPEG header: %s", jerr.msg);
        return NULL;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)buf.buf, (unsigned long)buf.len);
    jpeg_read_header(&cinfo, TRUE);
    PyObject *r = Py_BuildValue("(iiii)", (int)cinfo.image_height, (int)cinfo.image_width,
                                (int)cinfo.num_components, (int)cinfo.jpeg_color_space);
    jpeg_destroy_decompress(&cinfo); PyBuffer_Release(&buf);
    return r;
}

/* decode_crop(data, top, left, height, width) -> (bytearray of RGB rows, x0, y0, w, h)
 * Decodes rows [top, top+height) and the column range libjpeg-turbo can give that covers [left, left+width)
 * (widened to iMCU boundaries); the result is the w x h x 3 box starting at column x0, row y0. */
static PyObject *decode_crop(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int top, left, height, width;
    if (!PyArg_ParseTuple(args, "y*iiii", &buf, &top, &left, &height, &width)) return NULL;
    struct jpeg_decompress_struct cinfo;
    struct err_mgr jerr;
    PyObject *volatile out = NULL;
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = on_error; jerr.pub.emit_message = on_message;
    if (setjmp(jerr.jb)) {
        jpeg_destroy_decompress(&cinfo); PyBuffer_Release(&buf); Py_XDECREF(out);
        PyErr_Format(PyExc_ValueError, "JPEG decode: %s", jerr.msg);
        return NULL;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)buf.buf, (unsigned long)buf.len);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    int W = (int)cinfo.output_width, H = (int)cinfo.output_height;
    if (top < 0 || left < 0 || height < 1 || width < 1 || top + height > H || left + width > W) {
        jpeg_destroy_decompress(&cinfo); PyBuffer_Release(&buf);
        PyErr_Format(PyExc_ValueError, "crop box (top=%d, left=%d, height=%d, width=%d) is not inside the %dx%d image",
                     top, left, height, width, W, H);
        return NULL;
    }
    JDIMENSION x0 = (JDIMENSION)left, cw = (JDIMENSION)width;
    jpeg_crop_scanline(&cinfo, &x0, &cw);
    const int C = cinfo.output_components;
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)height * cw * C);
    if (!out) { jpeg_destroy_decompress(&cinfo); PyBuffer_Release(&buf); return NULL; }
    unsigned char *dst = (unsigned char *)PyByteArray_AS_STRING(out);
    if (top > 0) jpeg_skip_scanlines(&cinfo, (JDIMENSION)top);
    while ((int)cinfo.output_scanline < top + height) {
        JSAMPROW row = dst + (size_t)(cinfo.output_scanline - top) * cw * C;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_abort_decompress(&cinfo); /* the rows below the crop are never decoded */
    jpeg_destroy_decompress(&cinfo); PyBuffer_Release(&buf);
    return Py_BuildValue("(Niiii)", out, (int)x0, top, (int)cw, height);
}

/* channel_means(x uint8 (n, c, hw) buffer, out float32 (n, c) buffer, n, c, hw): per image and channel mean */
static PyObject *channel_means(PyObject *self, PyObject *args) {
    Py_buffer x, out; Py_ssize_t n, c, hw;
    if (!PyArg_ParseTuple(args, "y*w*nnn", &x, &out, &n, &c, &hw)) return NULL;
    const uint8_t *px = (const uint8_t *)x.buf; float *po = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n * c; i++) {
        const uint8_t *p = px + i * hw; uint64_t s = 0;
        for (Py_ssize_t k0 = 0; k0 < hw; k0 += 1 << 16) {  /* uint32 partial sums cannot overflow in 2^16 bytes */
            Py_ssize_t k1 = k0 + (1 << 16) < hw ? k0 + (1 << 16) : hw; uint32_t acc = 0;
            for (Py_ssize_t k = k0; k < k1; k++) acc += p[k];
            s += acc;
        }
        po[i] = (float)((double)s / (double)hw);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&x); PyBuffer_Release(&out); Py_RETURN_NONE;
}
/* affine_u8(x uint8 (n, c, hw), m float32 (n, c, c), b float32 (n, c), lo float32 (c), hi float32 (c), out float32 (n, c, hw), n, c, hw):
 * out[i, o, p] = clamp(sum_k m[i, o, k] * x[i, k, p] + b[i, o], lo[o], hi[o]) */
static PyObject *affine_u8(PyObject *self, PyObject *args) {
    Py_buffer x, m, b, lo, hi, out; Py_ssize_t n, c, hw;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*nnn", &x, &m, &b, &lo, &hi, &out, &n, &c, &hw)) return NULL;
    const uint8_t *px = (const uint8_t *)x.buf; const float *pm = (const float *)m.buf, *pb = (const float *)b.buf;
    const float *plo = (const float *)lo.buf, *phi = (const float *)hi.buf; float *po = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *xi = px + i * c * hw;
        for (Py_ssize_t co = 0; co < c; co++) {
            float *o = po + (i * c + co) * hw; const float *mr = pm + (i * c + co) * c; const float bb = pb[i * c + co];
            const float l = plo[co], h = phi[co];
            if (c == 3) {
                const float m0 = mr[0], m1 = mr[1], m2 = mr[2];
                const uint8_t *x0 = xi, *x1 = xi + hw, *x2 = xi + 2 * hw;
                for (Py_ssize_t p = 0; p < hw; p++) {
                    float v = m0 * (float)x0[p] + m1 * (float)x1[p] + m2 * (float)x2[p] + bb;
                    v = v < l ? l : v; o[p] = v > h ? h : v;
                }
            } else {
                for (Py_ssize_t p = 0; p < hw; p++) {
                    float v = bb; for (Py_ssize_t k = 0; k < c; k++) v += mr[k] * (float)xi[k * hw + p];
                    v = v < l ? l : v; o[p] = v > h ? h : v;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&x); PyBuffer_Release(&m); PyBuffer_Release(&b); PyBuffer_Release(&lo); PyBuffer_Release(&hi); PyBuffer_Release(&out);
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"header", header, METH_VARARGS, "header(data) -> (height, width, components, jpeg colour space)"},
    {"decode_crop", decode_crop, METH_VARARGS, "decode_crop(data, top, left, height, width) -> (bytearray RGB, x0, y0, w, h)"},
    {"channel_means", channel_means, METH_VARARGS, "channel_means(x_u8, out_f32, n, c, hw): per image and channel means"},
    {"affine_u8", affine_u8, METH_VARARGS, "affine_u8(x_u8, m, b, lo, hi, out_f32, n, c, hw): out = clamp(m @ x + b, lo, hi)"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_native", "Crop-aware JPEG decoding and the fused uint8 batch step", -1, methods};
PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&moddef); }
