#!/usr/bin/env bash
# Users and roles of an lnet depot directory in etcd (docs/directory.md, "Roles"). Run where etcdctl reaches the
# cluster: ETCDCTL_ENDPOINTS (and ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY with TLS) as etcdctl reads them.
#
#   etcd-auth.sh init                root user, the read-only role lnet-reader, authentication on
#   etcd-auth.sh add-depot NAME      user lnet-depot-NAME: may write PREFIX/depots/NAME and nothing else
#   etcd-auth.sh add-client NAME     user lnet-client-NAME: reads the depots and the overlay's memory, writes only
#                                    its own memory entry PREFIX/memory/NAME
#   etcd-auth.sh grant-datasets NAME client NAME may read the datasets (PREFIX/datasets/: their sources may carry
#                                    capabilities, so no client reads them unless granted)
#   etcd-auth.sh add-publisher NAME  user lnet-publisher-NAME: may publish datasets (lnet publish)
#
# Passwords come on stdin (one line), never as arguments (they would show in ps). After init, every command
# signs in as root with the password in the file named by ROOT_PASSWORD_FILE. LNET_DIRECTORY_PREFIX: the key
# prefix (default /lnet/).
set -euo pipefail
export ETCDCTL_API=3
prefix=${LNET_DIRECTORY_PREFIX:-/lnet/}
name_ok='^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'

as_root() {
    local password
    password=$(cat "${ROOT_PASSWORD_FILE:?set ROOT_PASSWORD_FILE to the file holding etcd root password}")
    ETCDCTL_USER="root:$password" etcdctl "$@"
}

read_password() {
    local password
    IFS= read -r password || true
    if [ ${#password} -lt 12 ]; then
        echo "etcd-auth.sh: give a password of 12 characters or more on stdin" >&2
        exit 2
    fi
    printf '%s\n' "$password"
}

cmd=${1:-help}
case "$cmd" in
    init)
        read_password | etcdctl user add root --interactive=false >/dev/null
        etcdctl user grant-role root root >/dev/null
        etcdctl role add lnet-reader >/dev/null
        etcdctl role grant-permission lnet-reader read --prefix=true "${prefix}depots/" >/dev/null
        etcdctl role grant-permission lnet-reader read --prefix=true "${prefix}memory/" >/dev/null
        etcdctl role add lnet-datasets-reader >/dev/null
        etcdctl role grant-permission lnet-datasets-reader read --prefix=true "${prefix}datasets/" >/dev/null
        etcdctl role add lnet-publisher >/dev/null
        etcdctl role grant-permission lnet-publisher readwrite --prefix=true "${prefix}datasets/" >/dev/null
        etcdctl auth enable >/dev/null
        echo "authentication on; role lnet-reader reads ${prefix}depots/ and ${prefix}memory/"
        ;;
    add-depot)
        name=${2:?usage: etcd-auth.sh add-depot NAME}
        [[ $name =~ $name_ok ]] || { echo "etcd-auth.sh: bad depot name $name" >&2; exit 2; }
        read_password | as_root user add "lnet-depot-$name" --interactive=false >/dev/null
        as_root role add "lnet-depot-$name" >/dev/null
        as_root role grant-permission "lnet-depot-$name" readwrite "${prefix}depots/$name" >/dev/null
        as_root user grant-role "lnet-depot-$name" "lnet-depot-$name" >/dev/null
        echo "user lnet-depot-$name writes ${prefix}depots/$name"
        ;;
    add-client)
        name=${2:?usage: etcd-auth.sh add-client NAME}
        [[ $name =~ $name_ok ]] || { echo "etcd-auth.sh: bad client name $name" >&2; exit 2; }
        read_password | as_root user add "lnet-client-$name" --interactive=false >/dev/null
        as_root role add "lnet-client-$name" >/dev/null
        as_root role grant-permission "lnet-client-$name" readwrite "${prefix}memory/$name" >/dev/null
        as_root user grant-role "lnet-client-$name" lnet-reader >/dev/null
        as_root user grant-role "lnet-client-$name" "lnet-client-$name" >/dev/null
        echo "user lnet-client-$name reads the directory and writes ${prefix}memory/$name"
        ;;
    grant-datasets)
        name=${2:?usage: etcd-auth.sh grant-datasets CLIENT}
        [[ $name =~ $name_ok ]] || { echo "etcd-auth.sh: bad client name $name" >&2; exit 2; }
        as_root user grant-role "lnet-client-$name" lnet-datasets-reader >/dev/null
        echo "user lnet-client-$name reads ${prefix}datasets/"
        ;;
    add-publisher)
        name=${2:?usage: etcd-auth.sh add-publisher NAME}
        [[ $name =~ $name_ok ]] || { echo "etcd-auth.sh: bad publisher name $name" >&2; exit 2; }
        read_password | as_root user add "lnet-publisher-$name" --interactive=false >/dev/null
        as_root user grant-role "lnet-publisher-$name" lnet-publisher >/dev/null
        echo "user lnet-publisher-$name publishes datasets under ${prefix}datasets/"
        ;;
    *)
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
        [ "$cmd" = help ] || exit 2
        ;;
esac
