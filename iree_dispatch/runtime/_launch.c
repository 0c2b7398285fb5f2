/* The hot path of a direct launch, compiled: pack a kernel's parameters and call cuLaunchKernel
 * (and cuStreamSynchronize when the call waits) in one Python call, where ctypes spends a few
 * microseconds converting arguments. The driver functions come as addresses from the ctypes
 * library the runtime already opened (compiled.py), so this file needs no CUDA headers and
 * links to nothing but Python.
 *
 *   set_driver(launch_address, synchronize_address)
 *   launch(function, grid, block, shared_memory, stream, values, wait) -> None or (launch rc, synchronize rc)
 *
 * values: one int per kernel parameter (IREE's kernel ABI: the buffers' addresses, then one
 * 32-bit word per push constant), each passed in its own 8-byte cell. None means success; a
 * failure returns the two CUDA result codes and raises nothing, so that the caller can retry
 * or name the error. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*LaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
typedef int (*StreamSynchronize)(void*);

#define MAX_PARAMETERS 256

static LaunchKernel launch_kernel = NULL;
static StreamSynchronize stream_synchronize = NULL;

static PyObject* set_driver(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "set_driver(launch_address, synchronize_address)");
    return NULL;
  }
  void* launch = PyLong_AsVoidPtr(args[0]);
  void* synchronize = PyLong_AsVoidPtr(args[1]);
  if (PyErr_Occurred()) return NULL;
  if (launch == NULL || synchronize == NULL) {
    PyErr_SetString(PyExc_ValueError, "set_driver: a null function address");
    return NULL;
  }
  launch_kernel = (LaunchKernel)launch;
  stream_synchronize = (StreamSynchronize)synchronize;
  Py_RETURN_NONE;
}

static int dims(PyObject* sequence, unsigned out[3], const char* what) {
  if (!PyTuple_Check(sequence) || PyTuple_GET_SIZE(sequence) != 3) {
    PyErr_Format(PyExc_TypeError, "launch: %s must be a tuple of 3 ints", what);
    return -1;
  }
  for (int i = 0; i < 3; ++i) {
    unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(sequence, i));
    if (PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFul) {
      PyErr_Format(PyExc_OverflowError, "launch: %s[%d] = %lu does not fit 32 bits", what, i, v);
      return -1;
    }
    out[i] = (unsigned)v;
  }
  return 0;
}

static PyObject* launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "launch(function, grid, block, shared_memory, stream, values, wait)");
    return NULL;
  }
  if (launch_kernel == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "launch: set_driver was not called");
    return NULL;
  }
  void* function = PyLong_AsVoidPtr(args[0]);
  unsigned grid[3], block[3];
  if (PyErr_Occurred() || dims(args[1], grid, "grid") || dims(args[2], block, "block")) return NULL;
  unsigned long shared_memory = PyLong_AsUnsignedLong(args[3]);
  void* stream = PyLong_AsVoidPtr(args[4]);
  int wait = PyObject_IsTrue(args[6]);
  if (PyErr_Occurred() || wait < 0) return NULL;
  PyObject* values = args[5];
  if (!PyList_Check(values) && !PyTuple_Check(values)) {
    PyErr_SetString(PyExc_TypeError, "launch: values must be a list or tuple of ints");
    return NULL;
  }
  Py_ssize_t count = PySequence_Fast_GET_SIZE(values);
  if (count > MAX_PARAMETERS) {
    PyErr_Format(PyExc_ValueError, "launch: %zd parameters, at most %d", count, MAX_PARAMETERS);
    return NULL;
  }
  PyObject** items = PySequence_Fast_ITEMS(values);
  uint64_t cells[MAX_PARAMETERS];
  void* parameters[MAX_PARAMETERS];
  for (Py_ssize_t i = 0; i < count; ++i) {
    cells[i] = PyLong_AsUnsignedLongLong(items[i]);
    if (PyErr_Occurred()) return NULL;
    parameters[i] = &cells[i];
  }
  int launched = launch_kernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2], (unsigned)shared_memory, stream, parameters, NULL);
  int synchronized = 0;
  if (!launched && wait) {
    Py_BEGIN_ALLOW_THREADS
    synchronized = stream_synchronize(stream);
    Py_END_ALLOW_THREADS
  }
  if (!launched && !synchronized) Py_RETURN_NONE;
  return Py_BuildValue("(ii)", launched, synchronized);
}

static PyMethodDef methods[] = {
    {"set_driver", (PyCFunction)(void (*)(void))set_driver, METH_FASTCALL, "Sets the addresses of cuLaunchKernel and cuStreamSynchronize."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "Launches a kernel; None, or the CUDA result codes of a failure."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__launch(void) { return PyModule_Create(&module); }
