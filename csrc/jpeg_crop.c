/* timmdata._jpeg: decode only the part of a JPEG that a crop needs, with libjpeg-turbo.
 *
 * A random-resized crop keeps on average about half of an image. libjpeg-turbo can skip the inverse DCT,
 * upsampling and colour conversion of the rows above the crop (jpeg_skip_scanlines) and of the columns
 * outside it (jpeg_crop_scanline), and stop reading once past the crop's last row. The pixels inside the
 * decoded box are those of a full decode, provided the box has a few pixels of margin around the crop (the
 * chroma upsampling looks at neighbouring samples); the Python side adds that margin.
 * Explained, measured and tested in nbs/01_dataset.ipynb. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <setjmp.h>
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

static PyMethodDef methods[] = {
    {"header", header, METH_VARARGS, "header(data) -> (height, width, components, jpeg colour space)"},
    {"decode_crop", decode_crop, METH_VARARGS, "decode_crop(data, top, left, height, width) -> (bytearray RGB, x0, y0, w, h)"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_jpeg", "Crop-aware JPEG decoding with libjpeg-turbo", -1, methods};
PyMODINIT_FUNC PyInit__jpeg(void) { return PyModule_Create(&moddef); }
