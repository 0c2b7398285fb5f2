/* The hot path of a direct call, compiled. The driver functions come as addresses from the
 * ctypes library the runtime already opened (compiled.py), so this file needs no CUDA headers
 * and links to nothing but Python.
 *
 *   set_driver(launch_kernel, stream_synchronize, ctx_get_current, ctx_push, ctx_pop, memset_d8_async)   their addresses
 *   launch(function, grid, block, shared_memory, stream, values, wait) -> None or (launch rc, synchronize rc)
 *   set_frameworks(device_array_type, entry_attribute, torch_tensor_type, torch_stream, cupy_array_type, cupy_stream)
 *   release_frameworks()   drops what set_frameworks holds (at interpreter exit, compiled.py)
 *   Calls(setup)   one kernel's prepared calls: .prepare(args, grid, words, outputs[, make_ahead[, shared_memory[, zeroed]]]), .call(args),
 *                  .forget(), len(); setup: compiled.CallsSetup, whose attributes are read once
 *   capsule_address(capsule) -> a DLPack capsule's data + byte_offset
 *
 * launch: one kernel launch in one Python call (ctypes spends microseconds converting
 * arguments). values: one int per kernel parameter (IREE's kernel ABI: the buffers' addresses,
 * then one 32-bit word per push constant), each passed in its own 8-byte cell. None means
 * success; a failure returns the two CUDA result codes and raises nothing, so that the caller
 * can retry or name the error.
 *
 * Calls: a call whose signature was seen before (the same kinds, dtypes and shapes of arrays,
 * the same integer scalars) needs nothing worked out again: its grid, push constants and output
 * shapes are those of the first call, which went through every check (launch.py). `prepare`
 * records them under the signature of that call's arguments; `call` reads the signature of new
 * arguments, and for a known one allocates the outputs, launches and returns the results, or
 * returns None when the caller must take the checked path. Only float scalars change between
 * calls of one signature: they are packed into their words on every call. A signature also fixes
 * the launch's dynamic shared memory (a size over sizes) and the bytes of each fresh output to
 * zero-fill, which is queued on the kernel's stream ahead of it (cuMemsetD8Async).
 *
 * Arrays a signature knows: the runtime's own device arrays that a direct call has seen (the
 * entry it recorded in the array's __dict__ under the attribute named by set_frameworks, which
 * the runtime defines once, as dlpack.LAUNCH_ENTRY: device, dtype, shape, address), and contiguous torch tensors or CuPy
 * arrays on the kernel's GPU (all of one framework in one call). A call on torch or CuPy arrays
 * is queued on that framework's current stream and returns at once; a call on our arrays is
 * queued on the launch stream and waits for it. A call runs with its device's primary context
 * current on the thread, pushed for the call where another one is current. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef int (*LaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
typedef int (*StreamSynchronize)(void*);
typedef int (*CtxGetCurrent)(void**);
typedef int (*CtxPush)(void*);
typedef int (*CtxPop)(void**);
typedef int (*MemsetD8Async)(unsigned long long, unsigned char, size_t, void*);

/* The digest of this file it was built from (compiled.source_digest), passed by whoever builds it
 * (setup.py at install, compiled.py at first use): an installed module built from another
 * version of this file is not used. */
#ifndef LAUNCH_SOURCE_DIGEST
#define LAUNCH_SOURCE_DIGEST ""
#endif

#define MAX_PARAMETERS 256
#define MAX_ARGUMENTS 64
#define MAX_PREPARED 64 /* signatures kept per kernel; beyond, the table starts again */

static LaunchKernel launch_kernel = NULL;
static StreamSynchronize stream_synchronize = NULL;
static CtxGetCurrent ctx_get_current = NULL;
static CtxPush ctx_push = NULL;
static CtxPop ctx_pop = NULL;
static MemsetD8Async memset_d8_async = NULL;

/* Array types a signature knows, and each framework's current stream by GPU ordinal. */
enum { NONE = 0, OURS = 1, TORCH = 2, CUPY = 3 };
static PyObject* device_array_type = NULL;
static PyObject* entry_attribute = NULL; /* the (interned) name of our arrays' entry, see above */
static PyObject* torch_tensor_type = NULL;
static PyObject* torch_stream = NULL;
static PyObject* cupy_array_type = NULL;
static PyObject* cupy_stream = NULL;

static PyObject *s_get_device, *s_is_contiguous, *s_dtype, *s_shape, *s_data_ptr, *s_device, *s_id, *s_flags,
    *s_c_contiguous, *s_data, *s_ptr, *s_requires_grad, *s_is_cuda;

static PyObject* set_driver(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError,
                    "set_driver(cuLaunchKernel, cuStreamSynchronize, cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPopCurrent, cuMemsetD8Async addresses)");
    return NULL;
  }
  void* addresses[6];
  for (int i = 0; i < 6; ++i) {
    addresses[i] = PyLong_AsVoidPtr(args[i]);
    if (PyErr_Occurred()) return NULL;
    if (addresses[i] == NULL) {
      PyErr_SetString(PyExc_ValueError, "set_driver: a null function address");
      return NULL;
    }
  }
  launch_kernel = (LaunchKernel)addresses[0];
  stream_synchronize = (StreamSynchronize)addresses[1];
  ctx_get_current = (CtxGetCurrent)addresses[2];
  ctx_push = (CtxPush)addresses[3];
  ctx_pop = (CtxPop)addresses[4];
  memset_d8_async = (MemsetD8Async)addresses[5];
  Py_RETURN_NONE;
}

static void replace(PyObject** slot, PyObject* value) {
  PyObject* old = *slot;
  *slot = value == Py_None ? NULL : value;
  Py_XINCREF(*slot);
  Py_XDECREF(old);
}

static PyObject* set_frameworks(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || !PyUnicode_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "set_frameworks(device_array_type, entry_attribute: str, torch_tensor_type, torch_stream, cupy_array_type, cupy_stream)");
    return NULL;
  }
  PyObject* name = Py_NewRef(args[1]);
  PyUnicode_InternInPlace(&name); /* looked up in every array's __dict__: its hash is computed once */
  replace(&entry_attribute, name);
  Py_DECREF(name);
  replace(&device_array_type, args[0]);
  replace(&torch_tensor_type, args[2]);
  replace(&torch_stream, args[3]);
  replace(&cupy_array_type, args[4]);
  replace(&cupy_stream, args[5]);
  Py_RETURN_NONE;
}

/* The references set_frameworks holds live in this module's statics, which nothing ever frees:
 * they are dropped at interpreter exit, before IREE's objects are torn down. */
static PyObject* release_frameworks(PyObject* self, PyObject* unused) {
  Py_CLEAR(device_array_type);
  Py_CLEAR(entry_attribute);
  Py_CLEAR(torch_tensor_type);
  Py_CLEAR(torch_stream);
  Py_CLEAR(cupy_array_type);
  Py_CLEAR(cupy_stream);
  Py_RETURN_NONE;
}

static int dims(PyObject* sequence, unsigned out[3], const char* what) {
  if (!PyTuple_Check(sequence) || PyTuple_GET_SIZE(sequence) != 3) {
    PyErr_Format(PyExc_TypeError, "%s must be a tuple of 3 ints", what);
    return -1;
  }
  for (int i = 0; i < 3; ++i) {
    unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(sequence, i));
    if (PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFul) {
      PyErr_Format(PyExc_OverflowError, "%s[%d] = %lu does not fit 32 bits", what, i, v);
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
  if (PyErr_Occurred() || dims(args[1], grid, "launch: grid") || dims(args[2], block, "launch: block")) return NULL;
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

/* capsule_address(capsule) -> the address of a DLPack capsule's first element (data +
 * byte_offset), read where ctypes takes a microsecond. The DLTensor layout is DLPack's ABI. */
typedef struct {
  void* data;
  int32_t device_type, device_id;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensorHead;

static PyObject* capsule_address(PyObject* self, PyObject* capsule) {
  DLTensorHead* tensor = PyCapsule_GetPointer(capsule, "dltensor");
  if (tensor == NULL) return NULL;
  return PyLong_FromUnsignedLongLong((uint64_t)(uintptr_t)tensor->data + tensor->byte_offset);
}

/* ---- Calls ------------------------------------------------------------------------------ */

/* One signature's launch. An object the garbage collector sees into: its output factories may
 * refer back to what holds it (a factory's device holds the outputs made ahead, which name their
 * entry), and such a cycle must be collectable, or the device and its IREE objects would live
 * past the interpreter's end. */
typedef struct {
  PyObject_HEAD
  unsigned grid[3];
  Py_ssize_t word_count;
  uint32_t words[MAX_PARAMETERS];
  PyObject* outputs; /* one factory per fresh output: each call makes a new array of the call's framework */
  int make_ahead;    /* a synchronous call makes the next call's outputs while its kernel runs */
  unsigned shared_memory;          /* the launch's bytes of dynamic shared memory */
  uint64_t zeroed[MAX_PARAMETERS]; /* per fresh output: bytes zero-filled before the kernel (0: none) */
} Entry;

static int Entry_traverse(Entry* self, visitproc visit, void* arg) {
  Py_VISIT(self->outputs);
  return 0;
}

static int Entry_clear(Entry* self) {
  Py_CLEAR(self->outputs);
  return 0;
}

static void Entry_dealloc(Entry* self) {
  PyObject_GC_UnTrack(self);
  Entry_clear(self);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "iree_dispatch.runtime._launch.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One signature's prepared launch (made by Calls.prepare)",
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_traverse = (traverseproc)Entry_traverse,
    .tp_clear = (inquiry)Entry_clear,
};

typedef struct {
  PyObject_HEAD
  PyObject* function_object; /* the CUfunction as the launcher takes it (a ctypes c_void_p) */
  void* function;
  unsigned block[3];
  unsigned shared_memory;
  void* own_stream;
  void* context;
  long ordinal;
  PyObject* device;        /* what our arrays' entries (set_frameworks) must name */
  PyObject* foreign;       /* the device's set of streams to wait for before a launch */
  PyObject* before_call;   /* before_call(on_stream): waits for them */
  PyObject* launch_safely; /* the launcher's launch(function, grid, block, shared_memory, stream, values, wait) */
  PyObject* fail;          /* fail(rc, what): raises the driver's error */
  PyObject* prepared;      /* signature → Entry */
  PyObject* ordinal_object;
  /* The device's outputs made ahead (see make_ahead), shared by all its kernels' Calls: a list
   * [the Entry they are for, a tuple of our arrays], or [None, None]. */
  PyObject* ahead;
  Py_ssize_t inputs, arity;
  char scalar_kinds[MAX_ARGUMENTS]; /* 'f' float, 'i' int, uint or bool */
  int float_slots[MAX_ARGUMENTS];   /* each float scalar's word */
  Py_ssize_t binding_count, result_count;
  int bindings[MAX_PARAMETERS]; /* i >= 0: input i; -1 - j: fresh output j */
  int results[MAX_PARAMETERS];  /* the same, for each result */
} Calls;

static int Calls_clear(Calls* self);

static int sources(PyObject* sequence, int* out, Py_ssize_t* count, const char* what) {
  if (!PyTuple_Check(sequence) || PyTuple_GET_SIZE(sequence) > MAX_PARAMETERS) {
    PyErr_Format(PyExc_TypeError, "Calls: %s must be a tuple of at most %d ints", what, MAX_PARAMETERS);
    return -1;
  }
  *count = PyTuple_GET_SIZE(sequence);
  for (Py_ssize_t i = 0; i < *count; ++i) {
    long source = PyLong_AsLong(PyTuple_GET_ITEM(sequence, i));
    if (PyErr_Occurred()) return -1;
    if (source < -MAX_PARAMETERS || source >= MAX_ARGUMENTS) {
      PyErr_Format(PyExc_ValueError, "Calls: %s: %ld names no input or output", what, source);
      return -1;
    }
    out[i] = (int)source;
  }
  return 0;
}

/* The attributes of a Calls' setup (compiled.py's CallsSetup), read once at construction. */
enum { F_FUNCTION, F_BLOCK, F_SHARED_MEMORY, F_OWN_STREAM, F_CONTEXT, F_ORDINAL, F_DEVICE, F_FOREIGN, F_AHEAD, F_BEFORE_CALL, F_LAUNCH_SAFELY,
       F_FAIL, F_INPUTS, F_SCALAR_KINDS, F_FLOAT_SLOTS, F_BINDINGS, F_RESULTS, SETUP_FIELDS };
static const char* setup_fields[SETUP_FIELDS] = {"function", "block", "shared_memory", "own_stream", "context", "ordinal", "device", "foreign", "ahead",
                                                 "before_call", "launch_safely", "fail", "inputs", "scalar_kinds", "float_slots", "bindings", "results"};

static int init_from(Calls* self, PyObject* const* field);

static int Calls_init(Calls* self, PyObject* args, PyObject* kwargs) {
  PyObject* setup;
  if (!PyArg_ParseTuple(args, "O:Calls", &setup)) return -1;
  PyObject* field[SETUP_FIELDS] = {NULL};
  int result = -1;
  for (int i = 0; i < SETUP_FIELDS; ++i) {
    field[i] = PyObject_GetAttrString(setup, setup_fields[i]);
    if (field[i] == NULL) goto done;
  }
  result = init_from(self, field);
done:
  for (int i = 0; i < SETUP_FIELDS; ++i) Py_XDECREF(field[i]);
  return result;
}

static int init_from(Calls* self, PyObject* const* field) {
  PyObject *function = field[F_FUNCTION], *block = field[F_BLOCK], *own_stream = field[F_OWN_STREAM], *context = field[F_CONTEXT],
           *device = field[F_DEVICE], *foreign = field[F_FOREIGN], *ahead = field[F_AHEAD], *before_call = field[F_BEFORE_CALL],
           *launch_safely = field[F_LAUNCH_SAFELY], *fail = field[F_FAIL], *kinds = field[F_SCALAR_KINDS], *slots = field[F_FLOAT_SLOTS],
           *bindings = field[F_BINDINGS], *results = field[F_RESULTS];
  unsigned long shared_memory = PyLong_AsUnsignedLong(field[F_SHARED_MEMORY]);
  if (PyErr_Occurred()) return -1;
  if (shared_memory > 0xFFFFFFFFul) {
    PyErr_SetString(PyExc_OverflowError, "Calls: shared_memory does not fit 32 bits");
    return -1;
  }
  self->ordinal = PyLong_AsLong(field[F_ORDINAL]);
  Py_ssize_t inputs = PyLong_AsSsize_t(field[F_INPUTS]);
  if (PyErr_Occurred()) return -1;
  if (!PyAnySet_Check(foreign) || !PyList_Check(ahead) || PyList_GET_SIZE(ahead) != 2 || !PyCallable_Check(before_call) ||
      !PyCallable_Check(launch_safely) || !PyCallable_Check(fail)) {
    PyErr_SetString(PyExc_TypeError, "Calls: foreign must be a set, ahead a list of 2; before_call, launch_safely and fail callables");
    return -1;
  }
  PyObject* address = PyObject_GetAttrString(function, "value");
  if (address == NULL) return -1;
  self->function = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  self->own_stream = PyLong_AsVoidPtr(own_stream);
  self->context = PyLong_AsVoidPtr(context);
  if (PyErr_Occurred() || dims(block, self->block, "Calls: block")) return -1;
  self->shared_memory = (unsigned)shared_memory;
  if (!PyBytes_Check(kinds) || PyBytes_GET_SIZE(kinds) > MAX_ARGUMENTS || !PyTuple_Check(slots)) {
    PyErr_SetString(PyExc_TypeError, "Calls: scalar kinds must be bytes ('f' or 'i' per scalar), float slots a tuple");
    return -1;
  }
  Py_ssize_t scalars = PyBytes_GET_SIZE(kinds), floats = 0;
  memcpy(self->scalar_kinds, PyBytes_AS_STRING(kinds), scalars);
  for (Py_ssize_t i = 0; i < scalars; ++i) {
    char kind = self->scalar_kinds[i];
    if (kind != 'f' && kind != 'i') {
      PyErr_SetString(PyExc_ValueError, "Calls: a scalar kind is 'f' or 'i'");
      return -1;
    }
    floats += kind == 'f';
  }
  if (PyTuple_GET_SIZE(slots) != floats) {
    PyErr_SetString(PyExc_ValueError, "Calls: one float slot per float scalar");
    return -1;
  }
  for (Py_ssize_t i = 0; i < floats; ++i) {
    long slot = PyLong_AsLong(PyTuple_GET_ITEM(slots, i));
    if (PyErr_Occurred()) return -1;
    if (slot < 0 || slot >= MAX_PARAMETERS) {
      PyErr_Format(PyExc_ValueError, "Calls: float slot %ld is no word", slot);
      return -1;
    }
    self->float_slots[i] = (int)slot;
  }
  if (inputs < 0 || inputs + scalars > MAX_ARGUMENTS) {
    PyErr_Format(PyExc_ValueError, "Calls: at most %d arguments", MAX_ARGUMENTS);
    return -1;
  }
  self->inputs = inputs;
  self->arity = inputs + scalars;
  if (sources(bindings, self->bindings, &self->binding_count, "bindings") || sources(results, self->results, &self->result_count, "results")) return -1;
  PyObject* prepared = PyDict_New();
  PyObject* ordinal = PyLong_FromLong(self->ordinal);
  if (prepared == NULL || ordinal == NULL) {
    Py_XDECREF(prepared);
    Py_XDECREF(ordinal);
    return -1;
  }
  Calls_clear(self); /* __init__ called again */
  self->prepared = prepared;
  self->ordinal_object = ordinal;
  self->function_object = Py_NewRef(function);
  self->device = Py_NewRef(device);
  self->foreign = Py_NewRef(foreign);
  self->ahead = Py_NewRef(ahead);
  self->before_call = Py_NewRef(before_call);
  self->launch_safely = Py_NewRef(launch_safely);
  self->fail = Py_NewRef(fail);
  return 0;
}

static int Calls_traverse(Calls* self, visitproc visit, void* arg) {
  Py_VISIT(self->function_object);
  Py_VISIT(self->device);
  Py_VISIT(self->foreign);
  Py_VISIT(self->before_call);
  Py_VISIT(self->launch_safely);
  Py_VISIT(self->fail);
  Py_VISIT(self->prepared);
  Py_VISIT(self->ordinal_object);
  Py_VISIT(self->ahead);
  return 0;
}

static int Calls_clear(Calls* self) {
  Py_CLEAR(self->function_object);
  Py_CLEAR(self->device);
  Py_CLEAR(self->foreign);
  Py_CLEAR(self->before_call);
  Py_CLEAR(self->launch_safely);
  Py_CLEAR(self->fail);
  Py_CLEAR(self->prepared);
  Py_CLEAR(self->ordinal_object);
  Py_CLEAR(self->ahead);
  return 0;
}

static void Calls_dealloc(Calls* self) {
  PyObject_GC_UnTrack(self);
  Calls_clear(self);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* attribute or method result as an unsigned 64-bit value; -1 with an exception set on failure */
static int call_method_u64(PyObject* object, PyObject* name, uint64_t* out) {
  PyObject* value = PyObject_CallMethodNoArgs(object, name);
  if (value == NULL) return -1;
  *out = PyLong_AsUnsignedLongLong(value);
  Py_DECREF(value);
  return PyErr_Occurred() ? -1 : 0;
}

static int attribute_u64(PyObject* object, PyObject* name, uint64_t* out) {
  PyObject* value = PyObject_GetAttr(object, name);
  if (value == NULL) return -1;
  *out = PyLong_AsUnsignedLongLong(value);
  Py_DECREF(value);
  return PyErr_Occurred() ? -1 : 0;
}

/* One array of a call: its framework, dtype and shape (new references) and address.
 * 0: known; 1: not an array a signature knows (no exception); -1: an exception. */
static int read_array(Calls* self, PyObject* value, int* framework, PyObject** dtype, PyObject** shape, uint64_t* address) {
  PyTypeObject* type = Py_TYPE(value);
  *dtype = *shape = NULL;
  if ((PyObject*)type == device_array_type && entry_attribute != NULL) {
    PyObject* dict = PyObject_GenericGetDict(value, NULL);
    if (dict == NULL) return -1;
    PyObject* known = PyDict_GetItemWithError(dict, entry_attribute); /* borrowed, kept alive by dict */
    if (known == NULL || !PyTuple_Check(known) || PyTuple_GET_SIZE(known) != 4 || PyTuple_GET_ITEM(known, 0) != self->device) {
      Py_DECREF(dict);
      return PyErr_Occurred() ? -1 : 1;
    }
    *address = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(known, 3));
    if (PyErr_Occurred()) {
      Py_DECREF(dict);
      return -1;
    }
    *dtype = Py_NewRef(PyTuple_GET_ITEM(known, 1));
    *shape = Py_NewRef(PyTuple_GET_ITEM(known, 2));
    Py_DECREF(dict);
    *framework = OURS;
    return 0;
  }
  if ((PyObject*)type == torch_tensor_type) {
    uint64_t cuda, contiguous, requires_grad;
    /* get_device() numbers other accelerators' tensors too: a CUDA tensor first */
    if (attribute_u64(value, s_is_cuda, &cuda)) return -1;
    if (!cuda) return 1;
    PyObject* device = PyObject_CallMethodNoArgs(value, s_get_device);
    if (device == NULL) return -1;
    long ordinal = PyLong_AsLong(device);
    Py_DECREF(device);
    if (ordinal == -1 && PyErr_Occurred()) return -1;
    if (ordinal != self->ordinal) return 1;
    if (call_method_u64(value, s_is_contiguous, &contiguous) || attribute_u64(value, s_requires_grad, &requires_grad)) return -1;
    if (!contiguous || requires_grad) return 1; /* the checked path refuses a tensor that requires grad (DLPack does) */
    if (call_method_u64(value, s_data_ptr, address)) return -1;
    *framework = TORCH;
  } else if ((PyObject*)type == cupy_array_type) {
    uint64_t id, contiguous;
    PyObject* device = PyObject_GetAttr(value, s_device);
    if (device == NULL) return -1;
    int failed = attribute_u64(device, s_id, &id);
    Py_DECREF(device);
    if (failed) return -1;
    if (id != (uint64_t)self->ordinal) return 1;
    PyObject* flags = PyObject_GetAttr(value, s_flags);
    if (flags == NULL) return -1;
    failed = attribute_u64(flags, s_c_contiguous, &contiguous);
    Py_DECREF(flags);
    if (failed) return -1;
    if (!contiguous) return 1;
    PyObject* data = PyObject_GetAttr(value, s_data);
    if (data == NULL) return -1;
    failed = attribute_u64(data, s_ptr, address);
    Py_DECREF(data);
    if (failed) return -1;
    *framework = CUPY;
  } else {
    return 1;
  }
  *dtype = PyObject_GetAttr(value, s_dtype);
  if (*dtype == NULL) return -1;
  *shape = PyObject_GetAttr(value, s_shape);
  if (*shape == NULL) {
    Py_CLEAR(*dtype);
    return -1;
  }
  return 0;
}

/* The address of a new output of the call's framework (made by its factory). */
static int address_of(Calls* self, int framework, PyObject* array, uint64_t* address) {
  if (framework == TORCH) return call_method_u64(array, s_data_ptr, address);
  if (framework == CUPY) {
    PyObject* data = PyObject_GetAttr(array, s_data);
    if (data == NULL) return -1;
    int failed = attribute_u64(data, s_ptr, address);
    Py_DECREF(data);
    return failed;
  }
  int kind;
  PyObject *dtype, *shape;
  int found = read_array(self, array, &kind, &dtype, &shape, address);
  if (found == 0) {
    Py_DECREF(dtype);
    Py_DECREF(shape);
    if (kind != OURS) found = 1;
  }
  if (found == 1) {
    PyErr_SetString(PyExc_TypeError, "an output factory made no device array a direct call knows");
  }
  return found ? -1 : 0;
}

/* The signature of a call's arguments (a new tuple: the framework, then each array's dtype and
 * shape, then each integer scalar's type and value), the arrays' addresses, the float scalars'
 * words and the framework. NULL with no exception: arguments no signature covers. */
static PyObject* signature(Calls* self, PyObject* args, uint64_t* addresses, uint32_t* float_words, int* framework) {
  if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->arity) return NULL;
  Py_ssize_t int_scalars = 0;
  for (Py_ssize_t i = self->inputs; i < self->arity; ++i) int_scalars += self->scalar_kinds[i - self->inputs] == 'i';
  PyObject* key = PyTuple_New(1 + 2 * self->inputs + 2 * int_scalars);
  if (key == NULL) return NULL;
  *framework = NONE;
  Py_ssize_t at = 1, floats = 0;
  for (Py_ssize_t i = 0; i < self->inputs; ++i) {
    int kind = NONE;
    PyObject *dtype, *shape;
    int found = read_array(self, PyTuple_GET_ITEM(args, i), &kind, &dtype, &shape, &addresses[i]);
    if (found == 0 && *framework != NONE && kind != *framework) {
      Py_DECREF(dtype);
      Py_DECREF(shape);
      found = 1; /* arrays of two frameworks: the checked path orders them */
    }
    if (found != 0) {
      Py_DECREF(key);
      return NULL;
    }
    *framework = kind;
    PyTuple_SET_ITEM(key, at++, dtype);
    PyTuple_SET_ITEM(key, at++, shape);
  }
  for (Py_ssize_t i = self->inputs; i < self->arity; ++i) {
    PyObject* value = PyTuple_GET_ITEM(args, i);
    PyTypeObject* type = Py_TYPE(value);
    if (self->scalar_kinds[i - self->inputs] == 'f') {
      if (type != &PyFloat_Type && type != &PyLong_Type) break;
      double number = PyFloat_AsDouble(value);
      if (number == -1.0 && PyErr_Occurred()) break;
      float single = (float)number;
      if (isinf(single) && !isinf(number)) break; /* rounds to an infinity: the checked path refuses it */
      memcpy(&float_words[floats++], &single, 4);
    } else {
      if (type != &PyLong_Type && type != &PyBool_Type) break;
      PyTuple_SET_ITEM(key, at++, Py_NewRef((PyObject*)type));
      PyTuple_SET_ITEM(key, at++, Py_NewRef(value));
    }
  }
  if (at != PyTuple_GET_SIZE(key) || floats + int_scalars != self->arity - self->inputs) {
    PyErr_Clear(); /* an int too large for a double */
    Py_DECREF(key);
    return NULL;
  }
  if (*framework == NONE) *framework = OURS;
  PyTuple_SET_ITEM(key, 0, PyLong_FromLong(*framework));
  if (PyTuple_GET_ITEM(key, 0) == NULL) {
    Py_DECREF(key);
    return NULL;
  }
  return key;
}

/* prepare(args, grid, words, outputs, make_ahead=True, shared_memory=the Calls', zeroed=()) ->
 * bool: records a checked call's launch under the signature of its arguments; False where no
 * signature covers them. make_ahead: whether a synchronous call of this entry makes its next
 * call's outputs. shared_memory: the launch's bytes (None: the Calls'). zeroed: per fresh
 * output, the bytes to zero-fill before the kernel (0: none); empty: none at all. */
static PyObject* Calls_prepare(Calls* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 4 || nargs > 7) {
    PyErr_SetString(PyExc_TypeError, "prepare(args, grid, words, outputs, make_ahead=True, shared_memory=None, zeroed=())");
    return NULL;
  }
  int make_ahead = nargs >= 5 ? PyObject_IsTrue(args[4]) : 1;
  if (make_ahead < 0) return NULL;
  uint64_t addresses[MAX_ARGUMENTS];
  uint32_t float_words[MAX_ARGUMENTS];
  int framework;
  PyObject* key = signature(self, args[0], addresses, float_words, &framework);
  if (key == NULL) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_FALSE;
  }
  PyObject *words = args[2], *outputs = args[3];
  Entry* entry = (Entry*)EntryType.tp_alloc(&EntryType, 0);
  if (entry == NULL) {
    Py_DECREF(key);
    return NULL;
  }
  if (dims(args[1], entry->grid, "prepare: grid")) goto failed;
  if (!PyTuple_Check(words) || PyTuple_GET_SIZE(words) + self->binding_count > MAX_PARAMETERS) {
    PyErr_SetString(PyExc_TypeError, "prepare: words must be a tuple of 32-bit ints");
    goto failed;
  }
  entry->word_count = PyTuple_GET_SIZE(words);
  for (Py_ssize_t i = 0; i < entry->word_count; ++i) {
    unsigned long word = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(words, i));
    if (PyErr_Occurred()) goto failed;
    if (word > 0xFFFFFFFFul) {
      PyErr_SetString(PyExc_OverflowError, "prepare: a word does not fit 32 bits");
      goto failed;
    }
    entry->words[i] = (uint32_t)word;
  }
  for (Py_ssize_t i = 0, floats = 0; i < self->arity - self->inputs; ++i) {
    if (self->scalar_kinds[i] == 'f' && self->float_slots[floats++] >= entry->word_count) {
      PyErr_SetString(PyExc_ValueError, "prepare: a float slot is beyond the words");
      goto failed;
    }
  }
  if (!PyTuple_Check(outputs) || PyTuple_GET_SIZE(outputs) > MAX_PARAMETERS) {
    PyErr_SetString(PyExc_TypeError, "prepare: outputs must be a tuple of factories");
    goto failed;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outputs); ++i) {
    if (!PyCallable_Check(PyTuple_GET_ITEM(outputs, i))) {
      PyErr_SetString(PyExc_TypeError, "prepare: outputs must be a tuple of factories");
      goto failed;
    }
  }
  for (Py_ssize_t i = 0; i < self->binding_count; ++i) {
    if (self->bindings[i] >= self->inputs || -1 - self->bindings[i] >= PyTuple_GET_SIZE(outputs)) {
      PyErr_SetString(PyExc_ValueError, "prepare: a binding names no input or output");
      goto failed;
    }
  }
  for (Py_ssize_t i = 0; i < self->result_count; ++i) {
    if (self->results[i] >= self->inputs || -1 - self->results[i] >= PyTuple_GET_SIZE(outputs)) {
      PyErr_SetString(PyExc_ValueError, "prepare: a result names no input or output");
      goto failed;
    }
  }
  entry->shared_memory = self->shared_memory;
  if (nargs >= 6 && args[5] != Py_None) {
    unsigned long shared_memory = PyLong_AsUnsignedLong(args[5]);
    if (PyErr_Occurred()) goto failed;
    if (shared_memory > 0xFFFFFFFFul) {
      PyErr_SetString(PyExc_OverflowError, "prepare: shared_memory does not fit 32 bits");
      goto failed;
    }
    entry->shared_memory = (unsigned)shared_memory;
  }
  if (nargs == 7) {
    PyObject* zeroed = args[6];
    if (!PyTuple_Check(zeroed) || (PyTuple_GET_SIZE(zeroed) && PyTuple_GET_SIZE(zeroed) != PyTuple_GET_SIZE(outputs))) {
      PyErr_SetString(PyExc_TypeError, "prepare: zeroed must be a tuple of byte counts, one per output");
      goto failed;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(zeroed); ++i) {
      entry->zeroed[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(zeroed, i));
      if (PyErr_Occurred()) goto failed;
    }
  }
  entry->outputs = Py_NewRef(outputs);
  entry->make_ahead = make_ahead && PyTuple_GET_SIZE(outputs) > 0;
  if (PyDict_GET_SIZE(self->prepared) >= MAX_PREPARED) PyDict_Clear(self->prepared);
  int stored = PyDict_SetItem(self->prepared, key, (PyObject*)entry);
  Py_DECREF(entry);
  Py_DECREF(key);
  if (stored) return NULL;
  Py_RETURN_TRUE;
failed:
  Py_DECREF(entry);
  Py_DECREF(key);
  return NULL;
}

/* Replaces the device's outputs made ahead by `outputs` (a reference it takes) for the entry
 * `entry`, releasing the old ones last (their finalizers may run). */
static void set_ahead(Calls* self, PyObject* entry, PyObject* outputs) {
  PyObject* old_entry = PyList_GET_ITEM(self->ahead, 0);
  PyObject* old_outputs = PyList_GET_ITEM(self->ahead, 1);
  PyList_SET_ITEM(self->ahead, 0, Py_NewRef(entry));
  PyList_SET_ITEM(self->ahead, 1, outputs);
  Py_DECREF(old_entry);
  Py_DECREF(old_outputs);
}

static void clear_ahead(Calls* self) { set_ahead(self, Py_None, Py_NewRef(Py_None)); }

/* Makes the outputs of the entry's next call while the GPU runs this one: a synchronous call
 * then waits for its kernel without having allocated on its way to the launch. A device keeps
 * one such set (the last entry's that makes them ahead), released first, so that its buffers
 * can serve the new set. Outputs that can't be made now (memory short) are left to the next
 * call, which makes them as ever. */
static void make_ahead(Calls* self, Entry* entry) {
  clear_ahead(self);
  Py_ssize_t count = PyTuple_GET_SIZE(entry->outputs);
  PyObject* made = PyTuple_New(count);
  if (made == NULL) {
    PyErr_Clear();
    return;
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* output = PyObject_CallNoArgs(PyTuple_GET_ITEM(entry->outputs, i));
    if (output == NULL) {
      PyErr_Clear();
      Py_DECREF(made);
      return;
    }
    PyTuple_SET_ITEM(made, i, output);
  }
  set_ahead(self, (PyObject*)entry, made);
}

/* Moves the device's outputs made ahead for `entry` into `outputs` (new references)
 * with their addresses; 0 where there are none for it, -1 with an exception. */
static Py_ssize_t take_ahead(Calls* self, Entry* entry, PyObject** outputs, uint64_t* addresses) {
  if (PyList_GET_ITEM(self->ahead, 0) != (PyObject*)entry) return 0;
  PyObject* made = Py_NewRef(PyList_GET_ITEM(self->ahead, 1));
  clear_ahead(self);
  Py_ssize_t count = PyTuple_GET_SIZE(made);
  for (Py_ssize_t i = 0; i < count; ++i) {
    outputs[i] = Py_NewRef(PyTuple_GET_ITEM(made, i));
    if (address_of(self, OURS, outputs[i], &addresses[i])) {
      for (Py_ssize_t j = 0; j <= i; ++j) Py_DECREF(outputs[j]);
      Py_DECREF(made);
      return -1;
    }
  }
  Py_DECREF(made);
  return count;
}

/* call(args) -> the results (one object, or a tuple of several), or None where the call must
 * take the checked path. */
static PyObject* Calls_call(Calls* self, PyObject* args) {
  uint64_t addresses[MAX_ARGUMENTS];
  uint32_t float_words[MAX_ARGUMENTS];
  int framework;
  PyObject* key = signature(self, args, addresses, float_words, &framework);
  if (key == NULL) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
  }
  Entry* entry = (Entry*)PyDict_GetItemWithError(self->prepared, key);
  Py_DECREF(key);
  if (entry == NULL) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
  }
  Py_INCREF(entry); /* kept while its outputs are made: a finalizer may clear the table */
  PyObject* results = NULL;
  PyObject* outputs[MAX_PARAMETERS];
  Py_ssize_t output_count = 0;
  uint64_t output_addresses[MAX_PARAMETERS];
  void* stream = self->own_stream;
  PyObject* stream_object = NULL;
  int pushed = 0;
  if (framework != OURS) {
    PyObject* getter = framework == TORCH ? torch_stream : cupy_stream;
    if (getter == NULL) goto done_none;
    PyObject* handle = PyObject_CallOneArg(getter, self->ordinal_object);
    if (handle == NULL) goto done;
    stream = PyLong_AsVoidPtr(handle);
    Py_DECREF(handle);
    if (PyErr_Occurred()) goto done;
    if (stream == NULL) stream = (void*)1; /* 0 names the legacy default stream, as 1 does */
    stream_object = PyLong_FromVoidPtr(stream);
    if (stream_object == NULL) goto done;
  }
  int wait = framework == OURS;
  /* The kernel's device's context current for the call: IREE's allocator allocates our outputs
   * in the thread's current context, and another GPU's may be current (several devices in one
   * process). Pushed where another is current, popped when the call is done; on a thread with
   * none it stays current, as the checked path leaves it (cuda_driver.context_of). */
  void* current = NULL;
  if (launch_kernel == NULL || ctx_get_current(&current)) goto done_none; /* the checked path names the error */
  if (current != self->context) {
    if (ctx_push(self->context)) goto done_none;
    pushed = current != NULL;
  }
  if (PySet_GET_SIZE(self->foreign)) {
    PyObject* waited = PyObject_CallOneArg(self->before_call, wait ? Py_None : stream_object);
    if (waited == NULL) goto done;
    Py_DECREF(waited);
  }
  PyObject* factories = entry->outputs;
  Py_ssize_t taken = framework == OURS ? take_ahead(self, entry, outputs, output_addresses) : 0;
  if (taken < 0) goto done;
  output_count = taken;
  if (!taken) {
    for (; output_count < PyTuple_GET_SIZE(factories); ++output_count) {
      outputs[output_count] = PyObject_CallNoArgs(PyTuple_GET_ITEM(factories, output_count));
      if (outputs[output_count] == NULL || address_of(self, framework, outputs[output_count], &output_addresses[output_count])) {
        ++output_count;
        goto done;
      }
    }
  }
  /* Zero-filled outputs: queued on the kernel's stream, so done before it runs. A failure
   * leaves the call to the checked path, which names the error. */
  for (Py_ssize_t i = 0; i < output_count; ++i) {
    if (entry->zeroed[i] && (memset_d8_async == NULL || memset_d8_async(output_addresses[i], 0, (size_t)entry->zeroed[i], stream))) goto done_none;
  }
  uint64_t cells[MAX_PARAMETERS];
  void* parameters[MAX_PARAMETERS];
  Py_ssize_t count = 0;
  for (Py_ssize_t i = 0; i < self->binding_count; ++i, ++count) {
    int source = self->bindings[i];
    cells[count] = source >= 0 ? addresses[source] : output_addresses[-1 - source];
  }
  for (Py_ssize_t i = 0; i < entry->word_count; ++i) cells[count + i] = entry->words[i];
  for (Py_ssize_t i = 0, floats = 0; i < self->arity - self->inputs; ++i) {
    if (self->scalar_kinds[i] == 'f') {
      cells[count + self->float_slots[floats]] = float_words[floats];
      ++floats;
    }
  }
  count += entry->word_count;
  for (Py_ssize_t i = 0; i < count; ++i) parameters[i] = &cells[i];
  /* After a failed launch, the launcher's own launch tries again and names the error. */
  int launched = launch_kernel(self->function, entry->grid[0], entry->grid[1], entry->grid[2], self->block[0], self->block[1], self->block[2],
                               entry->shared_memory, stream, parameters, NULL);
  if (launched != 0) {
    PyObject* values = PyList_New(count);
    if (values == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject* value = PyLong_FromUnsignedLongLong(cells[i]);
      if (value == NULL) {
        Py_DECREF(values);
        goto done;
      }
      PyList_SET_ITEM(values, i, value);
    } /* "N" below passes this reference on */
    PyObject* done = PyObject_CallFunction(self->launch_safely, "O(III)(III)IKNO", self->function_object, entry->grid[0], entry->grid[1], entry->grid[2],
                                           self->block[0], self->block[1], self->block[2], entry->shared_memory, (unsigned long long)(uintptr_t)stream,
                                           values, wait ? Py_True : Py_False);
    if (done == NULL) goto done;
    Py_DECREF(done);
  } else if (wait) {
    if (entry->make_ahead) make_ahead(self, entry);
    int synchronized;
    Py_BEGIN_ALLOW_THREADS
    synchronized = stream_synchronize(stream);
    Py_END_ALLOW_THREADS
    if (synchronized) {
      PyObject* raised = PyObject_CallFunction(self->fail, "is", synchronized, "cuStreamSynchronize (a kernel failed on the device)");
      Py_XDECREF(raised);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "cuStreamSynchronize failed");
      goto done;
    }
  }
  if (self->result_count == 1) {
    int source = self->results[0];
    results = Py_NewRef(source >= 0 ? PyTuple_GET_ITEM(args, source) : outputs[-1 - source]);
  } else {
    results = PyTuple_New(self->result_count);
    if (results == NULL) goto done;
    for (Py_ssize_t i = 0; i < self->result_count; ++i) {
      int source = self->results[i];
      PyTuple_SET_ITEM(results, i, Py_NewRef(source >= 0 ? PyTuple_GET_ITEM(args, source) : outputs[-1 - source]));
    }
  }
  goto done;
done_none:
  results = Py_NewRef(Py_None);
done:
  for (Py_ssize_t i = 0; i < output_count; ++i) Py_XDECREF(outputs[i]);
  Py_XDECREF(stream_object);
  Py_DECREF(entry);
  if (pushed) {
    void* popped;
    ctx_pop(&popped);
  }
  return results;
}

static Py_ssize_t Calls_length(Calls* self) { return self->prepared == NULL ? 0 : PyDict_GET_SIZE(self->prepared); }

/* forget() -> None: drops every prepared signature (and with them their output factories). */
static PyObject* Calls_forget(Calls* self, PyObject* unused) {
  if (self->prepared != NULL) PyDict_Clear(self->prepared);
  Py_RETURN_NONE;
}

static PyMappingMethods Calls_mapping = {.mp_length = (lenfunc)Calls_length};

static PyMethodDef Calls_methods[] = {
    {"prepare", (PyCFunction)(void (*)(void))Calls_prepare, METH_FASTCALL, "Records a checked call's launch under its arguments' signature."},
    {"call", (PyCFunction)Calls_call, METH_O, "The results of a call with a known signature, or None."},
    {"forget", (PyCFunction)Calls_forget, METH_NOARGS, "Drops every prepared signature."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CallsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "iree_dispatch.runtime._launch.Calls",
    .tp_basicsize = sizeof(Calls),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Calls(setup): one kernel's prepared calls; setup: an object with the attributes of compiled.CallsSetup, read once",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Calls_init,
    .tp_dealloc = (destructor)Calls_dealloc,
    .tp_traverse = (traverseproc)Calls_traverse,
    .tp_clear = (inquiry)Calls_clear,
    .tp_methods = Calls_methods,
    .tp_as_mapping = &Calls_mapping, /* len(): the signatures prepared */
};

static PyMethodDef methods[] = {
    {"set_driver", (PyCFunction)(void (*)(void))set_driver, METH_FASTCALL,
     "Sets the addresses of cuLaunchKernel, cuStreamSynchronize, cuCtxGetCurrent, cuCtxPushCurrent and cuCtxPopCurrent."},
    {"set_frameworks", (PyCFunction)(void (*)(void))set_frameworks, METH_FASTCALL, "Sets the array types a signature knows and the frameworks' stream getters."},
    {"release_frameworks", release_frameworks, METH_NOARGS, "Drops the references set_frameworks holds."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "Launches a kernel; None, or the CUDA result codes of a failure."},
    {"capsule_address", (PyCFunction)capsule_address, METH_O, "The address of a DLPack capsule's first element."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__launch(void) {
  struct {
    PyObject** slot;
    const char* text;
  } names[] = {{&s_get_device, "get_device"}, {&s_is_contiguous, "is_contiguous"}, {&s_dtype, "dtype"},
               {&s_shape, "shape"}, {&s_data_ptr, "data_ptr"}, {&s_device, "device"}, {&s_id, "id"}, {&s_flags, "flags"},
               {&s_c_contiguous, "c_contiguous"}, {&s_data, "data"}, {&s_ptr, "ptr"}, {&s_requires_grad, "requires_grad"},
               {&s_is_cuda, "is_cuda"}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
  }
  if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&CallsType) < 0) return NULL;
  PyObject* m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  if (PyModule_AddObjectRef(m, "Calls", (PyObject*)&CallsType) < 0 || PyModule_AddStringConstant(m, "SOURCE_DIGEST", LAUNCH_SOURCE_DIGEST) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
