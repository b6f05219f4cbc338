// SPDX-License-Identifier: Apache-2.0
// PyTorch extensions and Python environments as the tests that build them
// for several users make them: a small extension's sdist, a teammate's venv
// or conda-like environment of the same packages (hard links), and what a
// built binary names of the folders it was built in.
#pragma once

#include <string>
#include <utility>

namespace distcc_cuda::testing {

// A module `tiny_ext` of Python's C API alone (torch's headers would cost
// a minute of g++), whose kernels() answers 2: the body of a binding.cpp,
// after its #include <Python.h>.
inline constexpr char kTinyModule[] =
    R"(static PyObject* kernels(PyObject*, PyObject*) { return PyLong_FromLong(2); }
static PyMethodDef methods[] = {{"kernels", kernels, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "tiny_ext", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_tiny_ext() { return PyModule_Create(&module); }
)";

// The sdist of a small PyTorch extension in `folder`/dist: a binding of
// Python's C API (torch's headers would cost a minute of g++), and two
// kernels, one of which reads headers of torch's (c10's macros, and
// torch's version, which its device code holds). Its archive's path.
std::string MakeTinySdist(const std::string& python, const std::string& folder);

// DISTCC_TORCH_PYTHON and DISTCC_UV, absolute; "" where either is unset.
std::pair<std::string, std::string> TorchPythonAndUv();

inline constexpr char kNeedsTorchAndUv[] =
    "needs DISTCC_TORCH_PYTHON (a python with torch: scripts/torch_python) and DISTCC_UV (uv: "
    "scripts/uv), as scripts/test sets them";

// Whether `python` imports the extension installed in `target` and it
// answers.
void ExpectImports(const std::string& python, const std::string& target);

// The absolute paths in `binary`'s strings, a line each: what its debug
// information names.
std::string FoldersNamed(const std::string& binary);

// The torch venv's files at `venv` (a venv: pyvenv.cfg names the same
// Python), each a hard link to the original: a teammate's copy of the
// same packages, at no cost in disk.
void LinkVenv(const std::string& original, const std::string& venv);

// A conda environment's layout at `prefix`, as conda installs one: a
// Python of its own (the interpreter, its standard library, its headers
// under PREFIX/include/python3.X, its build data naming PREFIX where it
// named the original's, as conda rewrites an installed package's
// prefix), and the torch venv's packages in its site-packages. Hard links
// and links to the original's files. The environment's python.
std::string LinkCondaLikeEnvironment(const std::string& python, const std::string& venv,
                                     const std::string& prefix);

}  // namespace distcc_cuda::testing
