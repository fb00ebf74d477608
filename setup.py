"""Builds hetps._hetps with the project's CMake for `pip install --no-build-isolation .`.

The extension is the CMake target _hetps, built for the interpreter running pip. With
HETPS_BUILD_DIR set to a configured build directory, that one is used (and only _hetps is
rebuilt there); otherwise a Release build of the target alone is made in pip's build folder.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, ".pip-build"), exist_ok=True)  # setup.cfg's build folders


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("HETPS_BUILD_DIR")
        if not build_dir:
            build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
            subprocess.run(
                ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DHETPS_BUILD_TESTS=OFF", "-DHETPS_BUILD_EXAMPLES=OFF",
                 "-DHETPS_WITH_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}"],
                check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", build_dir, "--target", "_hetps", "-j", jobs],
                       check=True)
        built_dir = os.path.join(build_dir, "python", "hetps")
        built = [f for f in os.listdir(built_dir) if f.startswith("_hetps.") and f.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError(f"expected one _hetps extension in {built_dir}, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built_dir, built[0]), target)


setup(ext_modules=[CMakeExtension("hetps._hetps")], cmdclass={"build_ext": CMakeBuild})
