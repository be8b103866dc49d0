#!/usr/bin/env bash
# Download, here (where pip reaches the package registry), the wheels the H100 machine lacks:
# its image has Python 3.12 with torch, triton and numpy, but not the project's own
# dependencies that bench.gpu imports (amaranth for the simulation-side generators, jsonschema
# for the contract check). They land in .whl/ (ignored through .git/info/exclude); the device
# call carries .whl and bench/gpu/run_on_device.sh installs them into /tmp/site there.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for wheel in amaranth==0.5.10 jschon==0.11.1 rfc3986==2.0.0 pyvcd==0.4.2 \
             jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
             rpds-py==2026.9.1; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d .whl "$wheel"
done
ls -l .whl
