#!/usr/bin/env bash
# What a GPU lease's calls carry (README.md, "The next session with a GPU"), made here before the first call:
# .whl/ (ignored): the wheels the device lacks, for its Python 3.12, at the versions `make setup` installed in
# .venv, and connection-pool (no wheel) as its package folder in .whl/site/; results/downloads/: the 15
# Multi30k files of workflow/corpora.yaml, taken from a local git mirror of the multi30k/dataset repository
# at the pinned commit and checked against workflow/corpora.sha256.
#
#   benchmarks/gpu/prepare-carry.sh MULTI30K_GIT_DIR
#
# MULTI30K_GIT_DIR: a git directory holding the pinned commit (a `fetch` of github:multi30k/dataset gives one).
set -euo pipefail
mirror=${1:?usage: $0 MULTI30K_GIT_DIR}
py=.venv/bin/python
[ -x "$py" ] || { echo "no .venv: run make setup first" >&2; exit 2; }

# the device has torch, pandas, sacrebleu, pyyaml, requests, jinja2, psutil, tabulate, wrapt, tqdm, ...
# (/work/.library/device/KINDS.md); these it lacks
need='snakemake|snakemake-interface-.*|sqlmodel|pydantic|pydantic-core|typing-inspection|annotated-types|sqlalchemy'
need="$need|greenlet|conda-inject|dpath|yte|argparse-dataclass|throttler|configargparse|tenacity|humanfriendly"
need="$need|smart-open|wrapt|pulp|nbformat|traitlets|jupyter-core|fastjsonschema|gitpython|gitdb|smmap|docutils"
need="$need|immutables|platformdirs|termcolor|orjson|udtools|mtdata|jsonschema|jsonschema-specifications"
need="$need|referencing|rpds-py|sacremoses|subword-nmt|mock"
$py -m pip list --format=freeze 2>/dev/null | sed 's/_/-/g' | grep -i -E "^($need)==" > /tmp/carry-wheels.txt
mkdir -p .whl/site
$py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 -d .whl -r /tmp/carry-wheels.txt 2>&1 | grep -v "^WARNING: Location" || true
pool=$($py -c "import connection_pool, os; print(os.path.dirname(connection_pool.__file__))")
cp -r "$pool" .whl/site/
# a wheel missing here is a package missing there, found only when the lease's Snakemake fails to start
names=$(ls .whl/ | sed 's/_/-/g')
missing=$(sed 's/==.*//' /tmp/carry-wheels.txt | while read -r pkg; do
    grep -qi "^$pkg-[0-9]" <<< "$names" || echo "$pkg"; done)
echo "$(ls .whl/*.whl | wc -l) wheels of $(wc -l < /tmp/carry-wheels.txt) asked for, $(du -sh .whl | cut -f1) in .whl/"
[ -z "$missing" ] || { echo "no wheel in .whl/ for: $missing (pip download's messages above say why)" >&2; exit 1; }

trap 'rm -f results/downloads/.*.gz' EXIT      # a download cut short is not carried
commit=$(grep -o -m1 'multi30k/dataset/raw/[0-9a-f]*' workflow/corpora.yaml | cut -d/ -f4)
mkdir -p results/downloads
for set in train val test_2016_flickr test_2017_flickr test_2017_mscoco; do
    for lang in en de fr; do
        # through a temporary file: a mirror without the commit leaves the files already there as they were
        git --git-dir="$mirror" show "$commit:data/task1/raw/$set.$lang.gz" > "results/downloads/.$set.$lang.gz"
        mv "results/downloads/.$set.$lang.gz" "results/downloads/$set.$lang.gz"
    done
done
(cd results/downloads && sha256sum -c --ignore-missing --quiet ../../workflow/corpora.sha256)
echo "results/downloads: $(ls results/downloads | wc -l) Multi30k files of commit $commit, sha256 as pinned"
