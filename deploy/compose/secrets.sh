#!/usr/bin/env bash
# deploy/compose/secrets.sh [DIR] — make the secrets docker-compose.yaml mounts, once: a random
# Postgres password, the database URL that uses it, and the internal JWT key the services share.
# DIR defaults to $WEFT_COMPOSE_SECRETS or deploy/compose/secrets (git- and docker-ignored).
# Existing files are kept, so running it again changes nothing.
#
# The folder is 0700 (only you on the host); the files are 0644 because compose bind-mounts them
# into containers whose users (weft's uid 10001, postgres' uid 999) must read them.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=${1:-${WEFT_COMPOSE_SECRETS:-$root/deploy/compose/secrets}}
mkdir -p "$dir"
chmod 0700 "$dir"

# Hex: safe inside a URL's userinfo, and weft's env parser reads it as a string (the "weft-"
# prefix keeps a key that happens to be all digits from parsing as a number).
rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

put() { # NAME VALUE: write DIR/NAME unless it exists
    local file=$dir/$1
    if [[ -e $file ]]; then
        echo "secrets: keeping $file"
        return 0
    fi
    (umask 022 && printf '%s\n' "$2" >"$file.tmp" && mv "$file.tmp" "$file")
    chmod 0644 "$file"
    echo "secrets: wrote $file"
}

put postgres_password "$(rand_hex 24)"
put database_url "postgres://weft:$(tr -d '\n' <"$dir/postgres_password")@postgres:5432/weft"
put internal_jwt_secret "weft-$(rand_hex 32)"
