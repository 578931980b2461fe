#!/bin/sh
# The image's entrypoint (Dockerfile): load secrets from files, then run the binary that the
# first argument names.
#
#   gateway | router | executor | substrate | ingress | mcp-bridge   ->  weft-<name> ARGS...
#   weft | weft-<name>                                                ->  that binary ARGS...
#   anything else (migrate, token, doctor, --help, ...)               ->  weft ARGS...
#
# Secrets: weft reads its secrets (database.url, auth.internal_jwt_secret, redis.url, provider
# API keys) from the environment only. When WEFT_SECRETS_DIR names a folder, every file in it
# whose name is an environment variable name becomes that variable, with the file's content
# (trailing newlines dropped): a compose secret mounted at /run/secrets/WEFT_DATABASE__URL sets
# WEFT_DATABASE__URL. A variable set both ways is an error, so the two never silently disagree.
set -eu

if [ -n "${WEFT_SECRETS_DIR:-}" ]; then
    if [ ! -d "$WEFT_SECRETS_DIR" ]; then
        echo "weft-entrypoint: WEFT_SECRETS_DIR=$WEFT_SECRETS_DIR is not a folder" >&2
        exit 2
    fi
    for file in "$WEFT_SECRETS_DIR"/*; do
        [ -f "$file" ] || continue
        name=${file##*/}
        case $name in
            '' | [0-9]* | *[!A-Za-z0-9_]*) continue ;; # not a variable name (e.g. Kubernetes' ..data)
        esac
        if eval "[ -n \"\${$name+set}\" ]"; then
            echo "weft-entrypoint: $name is set in the environment and in $file; set it one way" >&2
            exit 2
        fi
        if ! value=$(cat "$file"); then
            echo "weft-entrypoint: cannot read $file (it must be readable by uid $(id -u))" >&2
            exit 2
        fi
        export "$name=$value"
    done
    unset name value file
fi

case ${1:-} in
    gateway | router | executor | substrate | ingress | mcp-bridge)
        svc=$1
        shift
        exec "/usr/local/bin/weft-$svc" "$@"
        ;;
    weft | weft-*)
        exec "$@"
        ;;
    *)
        exec /usr/local/bin/weft "$@"
        ;;
esac
