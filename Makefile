# Every target sets up .venv itself, with the tested versions of constraints.txt; the stamp makes a second
# run a no-op until pyproject.toml or constraints.txt changes. `make lock` takes the newest versions
# pyproject.toml allows and writes them to constraints.txt (then run `make test`).
# pip compiles every installed file's bytecode: this machine sets PYTHONDONTWRITEBYTECODE, so with --no-compile each
# process would compile every module it imports from source, every time. The editable install leaves the project's own
# modules uncompiled, so compileall does them (~0.25 s a `score` process and test worker); a module edited later is
# compiled in memory, as before.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
TEST_WORKERS ?= auto
# mkdocs-material prints a notice about a future MkDocs 2 on every build; it says nothing about this site.
export NO_MKDOCS_2_WARNING := 1

.PHONY: demo test test-fast lint typecheck docs venv clean lock

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -c constraints.txt -e '.[demo,test,docs,dev]'
	$(VENV)/bin/python -m compileall -q cli flows tasks
	touch $(STAMP)

lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet --upgrade -e '.[demo,test,docs,dev]'
	( echo "# The versions make and .ci/run install (pip install -c constraints.txt); written by \`make lock\`."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable | sed -E 's/^([^=]+==[^+]+)\+.*/\1/' | LC_ALL=C sort -f ) > constraints.txt
	rm -rf .venv-lock

demo: $(STAMP)
	$(VENV)/bin/score demo

# Every test, on one pytest worker per core (a module's tests stay on one worker: they share its fixtures), the
# modules in tests/conftest.py's order (the longest first; xdist would start the modules with the most tests first).
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# The inner loop: no flow on a Prefect server, no PostgreSQL or S3 server, no `score` process, no browser.
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" --durations=10

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The documentation site into build/site; strict: a broken link, anchor or nav entry fails the build.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

clean:
	rm -rf data/raw data/labels data/models data/output data/warehouse.duckdb
