#!/usr/bin/env bash
# recipe-bodies.sh: fetch the client libraries' own lock-script bodies from
# their packages, for the tests that prove fenceproxy's twin scripts have
# exactly the client's effect (test/recipes, internal/recipes).
#
#   scripts/recipe-bodies.sh [DIR]
#   export RECIPES_BODIES=DIR/redisson
#
# DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/fenceproxy/recipe-bodies,
# outside the repository: the bodies are third-party code and are never
# committed (docs/design/recipes.md names the packages and SHA-1s). The
# layout is the recipes study's: redis-py, redsync, redislock and node
# redlock bodies in DIR (redis-py-5.2.1-LUA_RELEASE_SCRIPT.lua ...), and
# Redisson's in DIR/redisson (lock.acquire.lua ...), which is what
# RECIPES_BODIES names. Each file is checked against the SHA-1 in the
# manifest below (the SHA-1s of the tests and of internal/recipes'
# catalogue); a mismatch fails and writes nothing. Files already in DIR
# with the right SHA-1 are kept, so a rerun needs no network.
#
# Sources, through each registry's own client: PyPI (pip download redis),
# the Go module proxy (go mod download: redsync, redislock), npm (npm pack
# redlock) and Maven Central (the redisson jar from ~/.m2, or mvn
# dependency:get). Redisson joins each body from Java string literals,
# which javac folds into one constant: the body is read from the class
# files' constant pools (scripts/internal/recipebodies).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD

die() {
	echo "recipe-bodies: $*" >&2
	exit 1
}

dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/fenceproxy/recipe-bodies}
m2=${M2_REPO:-$HOME/.m2/repository}

# The manifest: SHA-1, file (under DIR), registry, package, version, then
# where the body is: for pypi the file in the wheel and the class
# attribute, for go the file in the module and the variable, for npm the
# file in the tarball and the constant; maven needs nothing more (the jar
# is searched for the SHA-1).
manifest=$(
	cat <<'EOF'
c3f8721cbb97f72bc19e972846bd7aaf91901658 redis-py-5.2.1-LUA_RELEASE_SCRIPT.lua pypi redis 5.2.1 redis/lock.py LUA_RELEASE_SCRIPT
a4e8783852e6b949f9ef3a97212805108459a890 redis-py-5.2.1-LUA_EXTEND_SCRIPT.lua pypi redis 5.2.1 redis/lock.py LUA_EXTEND_SCRIPT
1cac51482acf5858da00f6d685d68f886cd6b6b2 redis-py-5.2.1-LUA_REACQUIRE_SCRIPT.lua pypi redis 5.2.1 redis/lock.py LUA_REACQUIRE_SCRIPT
f335028e570b0f7f958d558097d9857b8dd9b09b redis-py-8.2.0-LUA_EXTEND_SCRIPT.lua pypi redis 8.2.0 redis/lock.py LUA_EXTEND_SCRIPT
86adac77e1e4eac7090cbbe12386ad98a2b4124c redis-py-8.2.0-LUA_REACQUIRE_SCRIPT.lua pypi redis 8.2.0 redis/lock.py LUA_REACQUIRE_SCRIPT
e950836ed1e694540c503ef9972b8de518044d3b redsync-v4.18.1-deleteScript.lua go github.com/go-redsync/redsync/v4 v4.18.1 scripts.go deleteScript
d75bb8b5bd13532ddedd17762e772346e39b321e redsync-v4.18.1-touchScript.lua go github.com/go-redsync/redsync/v4 v4.18.1 scripts.go touchScript
b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79 redsync-v4.18.1-touchWithSetNXScript.lua go github.com/go-redsync/redsync/v4 v4.18.1 scripts.go touchWithSetNXScript
80a1b5f2cfccec3b7119ba7721d2127682b691a7 redislock-v0.9.4-luaObtain.lua go github.com/bsm/redislock v0.9.4 redislock.go luaObtain
cf0e94b2e9ffc7e04395cf88f7583fc309985910 redislock-v0.9.4-luaRelease.lua go github.com/bsm/redislock v0.9.4 redislock.go luaRelease
a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf redislock-v0.9.4-luaRefresh.lua go github.com/bsm/redislock v0.9.4 redislock.go luaRefresh
6484da7d58920897fdc22b7f9afd1a3d47524ea8 redislock-v0.9.4-luaPTTL.lua go github.com/bsm/redislock v0.9.4 redislock.go luaPTTL
96da70f7716f27d278a5218544df37fd8b0a5e4c redlock-5.0.0-beta.2-ACQUIRE_SCRIPT.lua npm redlock 5.0.0-beta.2 dist/cjs/index.js ACQUIRE_SCRIPT
aed6f382e410db8ba7926d4e5e9aab410bf2a78a redlock-5.0.0-beta.2-EXTEND_SCRIPT.lua npm redlock 5.0.0-beta.2 dist/cjs/index.js EXTEND_SCRIPT
e4612211c9f8f51c257e26e056b0a654b3187242 redlock-5.0.0-beta.2-RELEASE_SCRIPT.lua npm redlock 5.0.0-beta.2 dist/cjs/index.js RELEASE_SCRIPT
e5a322e2634ef59a516e8ea150cb085afafee684 redlock-4.2.0-lockScript.lua npm redlock 4.2.0 redlock.js lockScript
ce46f80993d5dac20dd066eb301a4e37994bdbed redlock-4.2.0-extendScript.lua npm redlock 4.2.0 redlock.js extendScript
0f0f23b9048b36752b5be114f357ba083449f908 redlock-4.2.0-unlockScript.lua npm redlock 4.2.0 redlock.js unlockScript
149c5a8bf18676fd99e9e6e24923bd64d9b62f94 redisson/lock.acquire.lua maven redisson 3.52.0
6a3d31570dc6f4b0bd32bcdc8e75667747c6f635 redisson/lock.renew-batch.lua maven redisson 3.52.0
6866459238a13a701d42f4971f12d9f3a50e2442 redisson/lock.unlock.lua maven redisson 3.52.0
605e338249a7a1d40df83b04f7658354f883b41b redisson/lock.forceunlock.lua maven redisson 3.52.0
dad0f8d619e548e04f21fb48d50be5034df3adae redisson/spin.acquire.lua maven redisson 3.52.0
73ac2729af29ea9a975f95e8097f7ee9a74cce3d redisson/spin.unlock.lua maven redisson 3.52.0
51b433c3cc9a6ca991b3aefec63d23490c246318 redisson/spin.forceunlock.lua maven redisson 3.52.0
49babb5a1e6a0c5f188c2ae62b93b51cdfd63e45 redisson/fenced.acquire-token.lua maven redisson 3.52.0
46b5551ba403d6152a7a6eca122e08728d6c8c66 redisson/fenced.acquire.lua maven redisson 3.52.0
8f6ed299ffd259f0539c20f89253998c0777ea75 redisson/fair.acquire.lua maven redisson 3.52.0
d20501c26a30adf6fb0fe9883bbbcc497e6157e2 redisson/fair.tryonce.lua maven redisson 3.52.0
d1ddef65ad80886b5d36e023c99930044ddd653a redisson/fair.dequeue.lua maven redisson 3.52.0
367f80bd2e300e411fb0936d9b601e5bcb3fd4b6 redisson/fair.unlock.lua maven redisson 3.52.0
71ed11d4e4818119ac560b3d670a7f08256afc46 redisson/fair.forceunlock.lua maven redisson 3.52.0
95553a6ff11176c18e71344e89d116b06fd6f753 redisson/read.acquire.lua maven redisson 3.52.0
6e1b10e11ac0a3ed8e902562ecd32ce01b553039 redisson/read.unlock.lua maven redisson 3.52.0
27dbe744e95c1d854a7f556cc6817030de2d0d01 redisson/read.forceunlock.lua maven redisson 3.52.0
1affef780a01e1406cb1968c62918f618d10d6a3 redisson/read.renew-batch.3.52.lua maven redisson 3.52.0
d6564f42b98d6eece0e940a478ee248f80b8a90a redisson/read.renew-batch.4.0.lua maven redisson 4.0.0
38d2b478dfbe264ab67c221b7e4be62245f00ba0 redisson/read.renew-batch.4.7.lua maven redisson 4.7.0
6306ba3bf1f563b284bed52d305fce615c6664d9 redisson/write.acquire.lua maven redisson 3.52.0
21f5fb0f8ddfa9be5c3e0c9757c128796add75c6 redisson/write.unlock.lua maven redisson 3.52.0
2e2cb2a3b13e2e80e4236ef6a25beaf365dba608 redisson/write.forceunlock.lua maven redisson 3.52.0
EOF
)

sha1() { sha1sum "$1" | cut -d' ' -f1; }

# have FILE SHA: FILE is in DIR with that SHA-1.
have() { [[ -f $dir/$1 ]] && [[ $(sha1 "$dir/$1") == "$2" ]]; }

missing=0
while read -r sha file _; do
	have "$file" "$sha" || missing=$((missing + 1))
done <<<"$manifest"
if ((missing == 0)); then
	exit 0
fi
echo "recipe-bodies: fetching $missing bodies into $dir" >&2

mkdir -p "$dir/redisson"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && go build -o "$tmp/recipebodies" ./scripts/internal/recipebodies) ||
	die "could not build scripts/internal/recipebodies"

# place SRC FILE SHA WHAT: check SRC's SHA-1, then move it into DIR
# (atomically: other test runs may read DIR at the same time).
place() {
	local src=$1 file=$2 sha=$3 what=$4 got
	got=$(sha1 "$src")
	if [[ $got != "$sha" ]]; then
		die "$what: the body read from the package has SHA-1 $got ($(wc -c <"$src") bytes), the tests expect $sha; the package or the extraction changed (nothing written)"
	fi
	mv "$src" "$dir/$file.part.$$" && mv "$dir/$file.part.$$" "$dir/$file"
}

# Each fetcher downloads a package once into $tmp and prints where it is.
pip_python() { # a python3 with pip: the system's, or a throwaway venv's
	if python3 -m pip --version >/dev/null 2>&1; then
		echo python3
		return
	fi
	[[ -x $tmp/venv/bin/python ]] || python3 -m venv "$tmp/venv" >&2 ||
		die "python3 has no pip, and python3 -m venv failed (apt-get install python3-venv)"
	echo "$tmp/venv/bin/python"
}
pypi_pkg() { # NAME VERSION: an unpacked wheel
	local d=$tmp/pypi-$1-$2
	if [[ ! -d $d ]]; then
		"$(pip_python)" -m pip download -q --no-deps --only-binary=:all: -d "$d.whl" "$1==$2" >&2 ||
			die "pip download $1==$2 failed (PyPI unreachable?)"
		python3 -m zipfile -e "$d.whl"/*.whl "$d" || die "could not unpack $1 $2's wheel"
	fi
	echo "$d"
}
go_mod() { # MODULE VERSION: the module's directory in the module cache
	local out
	out=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$1@$2") || die "go mod download $1@$2 failed (module proxy unreachable?)"
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$out"
}
npm_pkg() { # NAME VERSION: an unpacked tarball
	local d=$tmp/npm-$1-$2
	if [[ ! -d $d ]]; then
		mkdir -p "$d"
		(cd "$d" && npm pack --silent "$1@$2" >/dev/null) || die "npm pack $1@$2 failed (npm registry unreachable?)"
		tar -xzf "$d"/*.tgz -C "$d" || die "could not unpack $1 $2's tarball"
	fi
	echo "$d/package"
}
maven_jar() { # ARTIFACT VERSION: org.redisson's jar in the local repository
	local jar=$m2/org/redisson/$1/$2/$1-$2.jar
	if [[ ! -f $jar ]]; then
		mvn -q dependency:get -Dartifact="org.redisson:$1:$2" -Dtransitive=false >&2 ||
			die "mvn dependency:get org.redisson:$1:$2 failed (Maven Central unreachable?)"
	fi
	[[ -f $jar ]] || die "no $jar after mvn dependency:get"
	echo "$jar"
}

# py_attr FILE NAME: the string assigned to NAME (redis-py's class
# attributes), exact bytes.
py_attr() {
	python3 - "$1" "$2" <<'EOF'
import ast, sys
path, name = sys.argv[1], sys.argv[2]
for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str) \
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
        sys.stdout.buffer.write(node.value.value.encode("utf-8"))
        sys.exit(0)
sys.exit(f"no string {name} in {path}")
EOF
}

# js_const FILE NAME: the template literal assigned to NAME, evaluated by
# node itself (a literal with ${...} fails: it is not a fixed body).
js_const() {
	node -e '
const fs = require("fs"), vm = require("vm");
const [file, name] = process.argv.slice(1);
const src = fs.readFileSync(file, "utf8");
const m = new RegExp("\\b(?:const|let|var)\\s+" + name + "\\s*=\\s*`").exec(src);
if (!m) { console.error("no template literal " + name + " in " + file); process.exit(1); }
let end = m.index + m[0].length;
for (; end < src.length && src[end] !== "`"; end++) if (src[end] === "\\") end++;
process.stdout.write(vm.runInNewContext(src.slice(m.index + m[0].length - 1, end + 1), {}));
' "$1" "$2"
}

declare -A jars # maven version -> SHA1=OUT pairs for one pass over its jar
while read -r sha file registry pkg ver path name; do
	have "$file" "$sha" && continue
	out=$tmp/$(basename "$file")
	what="$registry $pkg $ver ${name:-}"
	case $registry in
	pypi) py_attr "$(pypi_pkg "$pkg" "$ver")/$path" "$name" >"$out" || die "$what: not found" ;;
	go)
		moddir=$(go_mod "$pkg" "$ver")
		"$tmp/recipebodies" go-string "$moddir/$path" "$name" >"$out" || die "$what: not found"
		;;
	npm) js_const "$(npm_pkg "$pkg" "$ver")/$path" "$name" >"$out" || die "$what: not found" ;;
	maven)
		jars[$ver]+=" $sha=$out"
		continue
		;;
	*) die "manifest: unknown registry $registry" ;;
	esac
	place "$out" "$file" "$sha" "$what"
done <<<"$manifest"

for ver in "${!jars[@]}"; do
	jar=$(maven_jar redisson "$ver")
	# shellcheck disable=SC2086 # a list of SHA1=OUT pairs
	"$tmp/recipebodies" class-strings "$jar" ${jars[$ver]} ||
		die "redisson $ver: a body is not one string constant of the jar (see above)"
	for pair in ${jars[$ver]}; do
		sha=${pair%%=*}
		file=$(awk -v s="$sha" '$1 == s { print $2 }' <<<"$manifest")
		place "${pair#*=}" "$file" "$sha" "maven redisson $ver $file"
	done
done
echo "recipe-bodies: $dir is complete (RECIPES_BODIES=$dir/redisson)" >&2
