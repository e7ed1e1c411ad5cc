"""Build the optional compiled fast path (kafkalog._speedups, Cython).

Metadata lives in pyproject.toml. Without Cython or a C compiler the package
still installs: it says so and kafkalog runs its pure-Python path.
"""

import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as err:  # no compiler, no Python headers, ...
            self._fell_back(err)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as err:
            self._fell_back(err)

    @staticmethod
    def _fell_back(err):
        print(f"kafkalog: the compiled fast path could not be built ({err}); "
              "installing the pure-Python decoder only", file=sys.stderr)


def extensions():
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("kafkalog: Cython is not available; installing the pure-Python decoder only",
              file=sys.stderr)
        return []
    from setuptools import Extension

    return cythonize(
        [Extension("kafkalog._speedups", ["kafkalog/_speedups.pyx"], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
