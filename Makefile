# `make demo` and `make test` build .venv from nothing and are quick once it exists.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-fast lint format docs install postgresql bench bench-gin clean

# Code checked and formatted by ruff (pyproject.toml [tool.ruff]); CI runs lint.
LINTED := gnnbridge tests benchmarks examples docs/conf.py docs/_ext setup.py _gnnbridge_dgl.py

install: $(STAMP)

# torch is installed first through the pinned constraints so no resolver step can choose a
# newer (multi-GB CUDA) build; everything else is pinned by the same file. An editable install
# leaves out gnnbridge-dgl.pth, the start-up line a wheel puts in site-packages so that a plain
# `import dgl` works (setup.py, _gnnbridge_dgl.py): it is copied there.
$(STAMP): pyproject.toml setup.py constraints.txt gnnbridge-dgl.pth gnnbridge/plugins/__init__.py | postgresql
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt torch
	$(PY) -m pip install -q -c constraints.txt -e '.[pyg,dgl,datasets,log,track,export,serve,tune,retrieval,partition,tables,test,lint,docs]'
	cp gnnbridge-dgl.pth "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	touch $(STAMP)

# The PostgreSQL server the tables tests start and stop themselves (tests/tables/test_postgres.py,
# a cluster in a temporary folder): Debian's package, installed only where its initdb is missing
# and we are root (elsewhere those tests say they are skipped and why). Checked on every install
# (order-only: it never makes the venv stale), a no-op once the binaries are there.
postgresql:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; \
	fi

demo: $(STAMP)
	$(VENV)/bin/gnnbridge train --backend pyg --nproc 2
	$(VENV)/bin/gnnbridge train --backend dgl --nproc 2

# The full suite: what CI runs (multi-process DDP, launch, kill and restart tests included).
# Six workers on two cores (most tests wait on subprocesses, ranks, servers and deadlines; see
# docs/development.md for what four and six took); tests that share a module fixture (a trained
# run, a built dataset) go to one worker, so it is built once (tests/conftest.py); every other test is handed out alone.
test: $(STAMP)
	$(PY) -m pytest -q -n 6 --dist loadgroup

# The everyday loop: unit tests only, no multi-process training runs (about 2 minutes on 2 cores).
test-fast: $(STAMP)
	$(PY) -m pytest -q -n 3 --dist loadgroup -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

format: $(STAMP)
	$(VENV)/bin/ruff check --fix $(LINTED)
	$(VENV)/bin/ruff format $(LINTED)

# The documentation site (docs/, Sphinx): warnings are errors, so a broken link, reference or
# docstring fails the build. Open docs/_build/html/index.html.
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

bench: $(STAMP)
	$(PY) benchmarks/compare.py

# Graph classification (GIN) against a hand-written DGL DDP script, seeds 0-2 (~4 min on CPU).
bench-gin: $(STAMP)
	$(PY) benchmarks/compare_gin.py

clean:
	rm -rf $(VENV) build *.egg-info docs/_build
