/* numarena._buffer: the exporter behind numarena.NodeBuffer.
 *
 * A NodeBuffer hands out numarena memory through the buffer protocol (memoryview, numpy,
 * bytes(), ctypes' from_buffer). Python cannot revoke a view once given, so the memory may be
 * freed only while no view exists -- the rule mmap.mmap and bytearray follow. This type keeps
 * that count: every PyObject_GetBuffer on it is counted until its PyBuffer_Release, close()
 * refuses with BufferError while the count is above zero, and once closed every request for
 * a view raises ValueError. It holds an address and a length and never frees anything itself:
 * NodeBuffer (python/numarena/__init__.py) frees the memory after close() here succeeded.
 *
 * Limited API (abi3, Python 3.11+: the buffer slots joined it in 3.11), so one build serves
 * every CPython from 3.11 on. The GIL serialises every method, so the count needs no lock.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
  PyObject_HEAD
  void* address;
  Py_ssize_t length;
  Py_ssize_t exports;
  int closed;
} ExporterObject;

static int Exporter_init(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  ExporterObject* self = (ExporterObject*)self_obj;
  static char* keywords[] = {"address", "length", NULL};
  unsigned long long address = 0;
  Py_ssize_t length = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Kn", keywords, &address, &length)) return -1;
  if (self->address != NULL || self->closed) {
    PyErr_SetString(PyExc_TypeError, "numarena._buffer.Exporter is initialised only once");
    return -1;
  }
  if (length < 0 || (length > 0 && address == 0)) {
    PyErr_Format(PyExc_ValueError,
                 "numarena._buffer.Exporter: %zd bytes at address %llu is not a buffer", length,
                 address);
    return -1;
  }
  self->address = (void*)(uintptr_t)address;
  self->length = length;
  return 0;
}

static int Exporter_getbuffer(PyObject* self_obj, Py_buffer* view, int flags) {
  ExporterObject* self = (ExporterObject*)self_obj;
  if (self->closed) {
    PyErr_SetString(PyExc_ValueError, "numarena.NodeBuffer: the buffer is closed");
    return -1;
  }
  if (PyBuffer_FillInfo(view, self_obj, self->address, self->length, 0, flags) != 0)
    return -1;
  self->exports++;
  return 0;
}

static void Exporter_releasebuffer(PyObject* self_obj, Py_buffer* view) {
  (void)view;
  ((ExporterObject*)self_obj)->exports--;
}

/* close(): marks the exporter closed, or raises BufferError while views exist. Returns True
 * when this call closed it, False when it was closed already. */
static PyObject* Exporter_close(PyObject* self_obj, PyObject* unused) {
  (void)unused;
  ExporterObject* self = (ExporterObject*)self_obj;
  if (self->closed) Py_RETURN_FALSE;
  if (self->exports > 0) {
    PyErr_Format(PyExc_BufferError,
                 "numarena.NodeBuffer.close: %zd view%s of the buffer still exist%s (memoryview, "
                 "numpy array, ctypes from_buffer ...); release them first (del them, or "
                 "memoryview.release()), then close",
                 self->exports, self->exports == 1 ? "" : "s", self->exports == 1 ? "s" : "");
    return NULL;
  }
  self->closed = 1;
  Py_RETURN_TRUE;
}

static PyObject* Exporter_get_exports(PyObject* self_obj, void* unused) {
  (void)unused;
  return PyLong_FromSsize_t(((ExporterObject*)self_obj)->exports);
}

static PyObject* Exporter_get_closed(PyObject* self_obj, void* unused) {
  (void)unused;
  return PyBool_FromLong(((ExporterObject*)self_obj)->closed);
}

static void Exporter_dealloc(PyObject* self_obj) {
  PyTypeObject* type = Py_TYPE(self_obj);
  PyObject_GC_UnTrack(self_obj);
  freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
  free_slot(self_obj);
  Py_DECREF(type);
}

static int Exporter_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self_obj));
  return 0;
}

static PyMethodDef Exporter_methods[] = {
    {"_close_exporter", Exporter_close, METH_NOARGS,
     "Marks the buffer closed (True), or says it was already (False); BufferError while "
     "views exist."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Exporter_getset[] = {
    {"_exports", Exporter_get_exports, NULL, "Views of the buffer that exist now.", NULL},
    {"_exporter_closed", Exporter_get_closed, NULL, "True once _close_exporter succeeded.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Exporter_slots[] = {
    {Py_tp_doc, "Counts the views of numarena memory and refuses to close while one exists."},
    {Py_tp_init, Exporter_init},
    {Py_tp_dealloc, Exporter_dealloc},
    {Py_tp_traverse, Exporter_traverse},
    {Py_tp_methods, Exporter_methods},
    {Py_tp_getset, Exporter_getset},
    {Py_bf_getbuffer, Exporter_getbuffer},
    {Py_bf_releasebuffer, Exporter_releasebuffer},
    {0, NULL},
};

static PyType_Spec Exporter_spec = {
    .name = "numarena._buffer.Exporter",
    .basicsize = sizeof(ExporterObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Exporter_slots,
};

static int module_exec(PyObject* module) {
  PyObject* type = PyType_FromModuleAndSpec(module, &Exporter_spec, NULL);
  if (type == NULL) return -1;
  if (PyModule_AddObjectRef(module, "Exporter", type) != 0) {
    Py_DECREF(type);
    return -1;
  }
  Py_DECREF(type);
  return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "numarena._buffer",
    .m_doc = "The exporter behind numarena.NodeBuffer (private).",
    .m_size = 0,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__buffer(void) { return PyModuleDef_Init(&module_def); }
