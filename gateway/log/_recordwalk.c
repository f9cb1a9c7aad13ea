/* The record walk of gateway.log.validate in C: the framing of a v2 record batch's
 * (uncompressed) records section, without building an object per record.
 *
 * Record (all varints zigzag-encoded, as Kafka writes them):
 *   length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
 *   keyLength varint (-1: null) | key | valueLength varint (-1: null) | value |
 *   headerCount varint | headers: keyLength varint (>= 0) | key | valueLength varint | value
 *
 * walk(records, count) -> None, or raises ValueError naming the first record at fault:
 * exactly `count` records fill `records`, each one's fields fill its length, its offset
 * delta is its index. The GIL is released during the walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Reads a zigzag varint of at most `max_bytes` bytes; 0 on success. */
static int read_varint(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos,
                       int max_bytes, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= end)
            return -1;
        unsigned char b = buf[(*pos)++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* Skips a length-prefixed field; `min_len` is -1 where null is allowed. */
static int skip_bytes(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t min_len) {
    int64_t len;
    if (read_varint(buf, end, pos, 5, &len) || len < min_len || len > end - *pos)
        return -1;
    if (len > 0)
        *pos += (Py_ssize_t)len;
    return 0;
}

static const char *walk_records(const unsigned char *buf, Py_ssize_t end, int64_t count,
                                int64_t *at) {
    Py_ssize_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, value;
        *at = i;
        if (read_varint(buf, end, &pos, 5, &length) || length < 1 || length > end - pos)
            return "its length runs past the records";
        Py_ssize_t stop = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        if (read_varint(buf, stop, &pos, 10, &value))
            return "bad timestamp delta";
        if (read_varint(buf, stop, &pos, 5, &value))
            return "bad offset delta";
        if (value != i)
            return "its offset delta is not its index (deltas must be 0, 1, 2, ...)";
        if (skip_bytes(buf, stop, &pos, -1))
            return "bad key length";
        if (skip_bytes(buf, stop, &pos, -1))
            return "bad value length";
        if (read_varint(buf, stop, &pos, 5, &value) || value < 0)
            return "bad header count";
        for (int64_t h = 0; h < value; h++) {
            if (skip_bytes(buf, stop, &pos, 0))
                return "bad header key length";
            if (skip_bytes(buf, stop, &pos, -1))
                return "bad header value length";
        }
        if (pos != stop)
            return "its fields do not fill its length";
    }
    *at = count;
    if (pos != end)
        return "bytes are left after the last record";
    return NULL;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long count;
    if (!PyArg_ParseTuple(args, "y*L", &view, &count))
        return NULL;
    const char *error;
    int64_t at = 0;
    Py_BEGIN_ALLOW_THREADS
    error = walk_records((const unsigned char *)view.buf, view.len, (int64_t)count, &at);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (error != NULL) {
        if (at >= count)
            PyErr_SetString(PyExc_ValueError, error);
        else
            PyErr_Format(PyExc_ValueError, "record %lld: %s", (long long)at, error);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(records, count): check the framing of v2 records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordwalk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordwalk(void) { return PyModule_Create(&module); }
