"""verifuse build: CMake builds the C++ core and the verifuse._C extension.

Install with the pinned torch already present and without build isolation (an isolated build
would download a different torch):

    pip install -r requirements.txt && pip install --no-build-isolation .

The CMake build directory is build/cmake (kept between builds, so reinstalls are incremental);
ctest runs the GoogleTest suites from there.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.environ.get("VERIFUSE_BUILD_DIR", os.path.join(ROOT, "build", "cmake"))
PROOF_STORE = "proofs-v2.vfstore"  # verifuse.installed_proofs.STORE_FILE


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        jobs = os.environ.get("VERIFUSE_JOBS", str(os.cpu_count() or 2))
        build_type = os.environ.get("VERIFUSE_BUILD_TYPE", "Release")
        configure = [
            "cmake", "-S", ROOT, "-B", BUILD_DIR, f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_BUILD_TYPE={build_type}",
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"] if not os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")) else []
        if os.environ.get("VERIFUSE_BUILD_TESTS", "1") == "0":
            configure.append("-DVERIFUSE_BUILD_TESTS=OFF")
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", BUILD_DIR, "-j", jobs])
        built = os.path.join(BUILD_DIR, "python", os.path.basename(self.get_ext_filename(ext.name)))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        self._prove_rules(os.path.dirname(target))

    def _prove_rules(self, package_dir: str) -> None:
        """Proves every rule once, now, into verifuse/proofs/PROOF_STORE of the package
        (verifuse/installed_proofs.py): a new cache starts from it instead of running Z3 on the
        first compile. Only Proved/Refuted verdicts are stored, each checked against its
        obligation and Z3 version on lookup. A failure here costs only that: compiles prove."""
        out = os.path.join(package_dir, "proofs")
        scratch = os.path.join(BUILD_DIR, "install-proofs")
        shutil.rmtree(scratch, ignore_errors=True)
        env = dict(os.environ)
        # build_py has run: the package and the extension just built are both in build_lib.
        paths = [os.path.dirname(package_dir)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        rc = subprocess.call([sys.executable, "-m", "verifuse", "prove", "--cache-dir", scratch],
                             env=env, stdout=subprocess.DEVNULL)
        store = os.path.join(scratch, PROOF_STORE)
        if not os.path.isfile(store):
            print(f"verifuse: warning: the install-time rule proofs failed (exit {rc}); "
                  "compiles will prove the rules themselves")
            return
        if rc != 0:
            print("verifuse: warning: not every rule proved at install time (`python -m verifuse prove` "
                  "says which); their verdicts are stored as they came out and compiles reject those rules")
        os.makedirs(out, exist_ok=True)
        shutil.copyfile(store, os.path.join(out, PROOF_STORE))


setup(
    name="verifuse",
    version="0.1.0",
    description="A torch.compile backend for CPU inference that proves its rewrites with Z3",
    python_requires=">=3.10",
    package_dir={"": "backend/python", "verifuse_bench": "bench/verifuse_bench"},
    packages=find_packages("backend/python") + ["verifuse_bench"],
    ext_modules=[CMakeExtension("verifuse._C")],
    cmdclass={"build_ext": CMakeBuild},
    # torch is deliberately not listed: it must be torch==2.13.0 from requirements.txt, and a
    # listed requirement invites pip to resolve a different (CUDA) build.
    install_requires=["z3-solver", "numpy"],
    entry_points={"torch_dynamo_backends": ["verifuse = verifuse.backend:verifuse_backend"]},
    zip_safe=False,
)
