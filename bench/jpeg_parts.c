/* Issue 60: where a JPEG decode's CPU goes, split by what libjpeg-turbo can be asked to skip (no debug symbols needed).
 * For each file (argv[2..]), best of `reps` (argv[1]) runs of:
 *   coef  jpeg_read_coefficients: header + entropy (Huffman) decoding only
 *   ycc   full decode to YCbCr, fancy upsampling off: + IDCT (and plain upsampling)
 *   fancy full decode to YCbCr with fancy upsampling (libjpeg's default): + fancy upsampling
 *   rgb   full decode to RGB (the default output): + colour conversion
 *   half  rgb with the scaled IDCT at 1/2 (M/8 = 4/8), the output a quarter of the pixels
 * Prints one line per file: name, then seconds for each, tab-separated. Files that are not JPEGs print "skip".
 * Built and run by bench/bench_cpu_parts.py (cc -O2 ... -ljpeg). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <time.h>
#include <jpeglib.h>

struct err { struct jpeg_error_mgr pub; jmp_buf jb; };
static void on_error(j_common_ptr c) { longjmp(((struct err *)c->err)->jb, 1); }
static void quiet(j_common_ptr c, int l) { (void)c; (void)l; }

static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

/* mode 0 coef, 1 ycc (no fancy), 2 ycc fancy, 3 rgb, 4 rgb at 1/2; returns seconds or -1 */
static double run(const unsigned char *buf, unsigned long n, int mode) {
    struct jpeg_decompress_struct ci; struct err e; JSAMPARRAY row = NULL;
    ci.err = jpeg_std_error(&e.pub); e.pub.error_exit = on_error; e.pub.emit_message = quiet;
    double t0 = now();
    if (setjmp(e.jb)) { jpeg_destroy_decompress(&ci); return -1; }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, n);
    jpeg_read_header(&ci, TRUE);
    if (mode == 0) { jpeg_read_coefficients(&ci); jpeg_destroy_decompress(&ci); return now() - t0; }
    if (ci.jpeg_color_space == JCS_YCbCr) ci.out_color_space = mode == 1 || mode == 2 ? JCS_YCbCr : JCS_RGB;
    ci.do_fancy_upsampling = mode != 1;
    if (mode == 4) { ci.scale_num = 4; ci.scale_denom = 8; }
    jpeg_start_decompress(&ci);
    row = (*ci.mem->alloc_sarray)((j_common_ptr)&ci, JPOOL_IMAGE, ci.output_width * ci.output_components, 1);
    while (ci.output_scanline < ci.output_height) jpeg_read_scanlines(&ci, row, 1);
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    return now() - t0;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    for (int i = 2; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb"); if (!f) { printf("%s\tskip\n", argv[i]); continue; }
        fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
        if (n <= 0 || n > (64L << 20)) { fclose(f); printf("%s\tskip\n", argv[i]); continue; }
        unsigned char *buf = malloc(n); size_t got = fread(buf, 1, n, f); fclose(f);
        if ((long)got != n || n < 3 || buf[0] != 0xFF || buf[1] != 0xD8) { free(buf); printf("%s\tskip\n", argv[i]); continue; }
        printf("%s", argv[i]);
        for (int m = 0; m < 5; m++) {
            double best = 1e9;
            for (int r = 0; r < reps; r++) { double t = run(buf, n, m); if (t >= 0 && t < best) best = t; }
            printf("\t%.6f", best < 1e9 ? best : -1.0);
        }
        printf("\n");
        free(buf);
    }
    return 0;
}
