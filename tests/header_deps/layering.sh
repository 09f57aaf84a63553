#!/usr/bin/env bash
# The layering checks of include/numaplace, run by ctest (tests/CMakeLists.txt); the rules of the include
# graph are in layering.txt beside this script. Prints what breaks a rule and exits 1; exits 0 otherwise.
#
#   layering.sh pulls|probe <rule> <table> <include-dir> <header_alone.cpp> <c++> <flags, joined by |>
#   layering.sh direct <rule> <table> <include-dir>
#   layering.sh syscalls <include-dir>     no raw system call outside detail/linux.hpp
#   layering.sh atfork <include-dir>       no pthread_atfork outside detail/fork.hpp
#   layering.sh lines <include-dir> [max]  no header over max (450) lines
set -uo pipefail
shopt -s nullglob

die() { echo "layering.sh: $*" >&2; exit 2; }

# A glob of layering.txt as an anchored regex: `*` stays inside one directory.
glob_regex() {
    local g=$1 r=""
    local i c
    for ((i = 0; i < ${#g}; ++i)); do
        c=${g:i:1}
        case $c in
        '*') r+='[^/]*' ;;
        '.' | '+' | '(' | ')' | '[' | ']' | '^' | '$' | '|' | '?' | '{' | '}' | '\') r+="\\$c" ;;
        *) r+=$c ;;
        esac
    done
    printf '^%s$' "$r"
}

# The row `<kind> <rule> | <headers> | <files>` of the table: sets row_headers and row_files.
read_row() {
    local kind=$1 rule=$2 table=$3 line found=0
    while IFS= read -r line; do
        [[ $line =~ ^[[:space:]]*# || -z ${line//[[:space:]]/} ]] && continue
        local head=${line%%|*} rest=${line#*|}
        read -r k n <<<"$head"
        if [ "$k" = "$kind" ] && [ "$n" = "$rule" ]; then
            read -r row_headers <<<"${rest%%|*}" # trimmed
            read -r row_files <<<"${rest#*|}"
            found=1
        fi
    done <"$table"
    [ $found -eq 1 ] || die "no row '$kind $rule' in $table"
}

# The headers a space-separated list of globs names, relative to include/numaplace; none is an error.
expand_headers() {
    local root=$1 g f
    local -a globs
    read -r -a globs <<<"$2"
    headers=()
    for g in "${globs[@]}"; do
        local matched=0
        for f in "$root"/$g; do
            headers+=("${f#"$root"/}")
            matched=1
        done
        [ $matched -eq 1 ] || { echo "no header matches '$g' under $root"; return 1; }
    done
}

# pulls/probe: preprocess each header alone with -H (GCC and Clang print every header they open, one dot
# per level) and look for the forbidden files in that tree, with the chain that brought each in.
check_pulls() {
    local mode=$1 rule=$2 table=$3 include=$4 source=$5 cxx=$6 joined=$7
    local root=$include/numaplace
    local -a flags=()
    IFS='|' read -r -a flags <<<"$joined"
    read_row "$mode" "$rule" "$table"
    expand_headers "$root" "$row_headers" || return 1
    local -a patterns=() files
    local f
    read -r -a files <<<"$row_files"
    for f in "${files[@]}"; do
        if [[ $f == \<*\> ]]; then
            f=${f#<}
            patterns+=("std:${f%>}")
        else
            patterns+=("np:$(glob_regex "$f")")
        fi
    done
    local h failures=0 found=0
    for h in "${headers[@]}"; do
        local out rc
        out=$("$cxx" "${flags[@]}" "-DNUMAPLACE_HEADER=<numaplace/$h>" -E -H -o /dev/null "$source" 2>&1)
        rc=$?
        if [ $rc -ne 0 ]; then
            echo "numaplace/$h does not preprocess alone:"
            echo "$out" | grep -v '^\.' | head -20
            return 1
        fi
        local -a chain=()
        local line dots path depth shown=""
        while IFS= read -r line; do
            [[ $line =~ ^(\.+)\ (.+)$ ]] || continue
            dots=${BASH_REMATCH[1]}
            path=$(realpath -m -- "${BASH_REMATCH[2]}")
            depth=${#dots}
            local rel=""
            [[ $path == "$(realpath -m -- "$root")"/* ]] && rel=${path#"$(realpath -m -- "$root")"/}
            chain[depth]=${rel:-$path}
            local p hit=""
            for p in "${patterns[@]}"; do
                if [[ $p == std:* ]]; then
                    [ -z "$rel" ] && [ "${path##*/}" = "${p#std:}" ] && hit="<${p#std:}>"
                elif [ -n "$rel" ] && [[ $rel =~ ${p#np:} ]]; then
                    hit="numaplace/$rel"
                fi
            done
            if [ -n "$hit" ] && [[ " $shown " != *" $hit "* ]]; then
                shown+=" $hit"
                local via="" d
                for ((d = 1; d < depth; ++d)); do via+="${chain[d]##*/numaplace/} -> "; done
                echo "numaplace/$h pulls in $hit (via ${via}${hit})"
                found=$((found + 1))
            fi
        done <<<"$out"
    done
    if [ "$mode" = probe ]; then
        [ $found -gt 0 ] && { echo "probe $rule fired, as it must"; return 0; }
        echo "probe $rule: the check saw nothing it forbids: it would pass whatever the headers include"
        return 1
    fi
    [ $found -eq 0 ] && { echo "${#headers[@]} header(s) checked: none pulls in $row_files"; return 0; }
    return 1
}

# direct: the public headers each header includes itself (#include "../x.hpp" and the like).
check_direct() {
    local rule=$1 table=$2 include=$3
    local root=$include/numaplace
    read_row direct "$rule" "$table"
    expand_headers "$root" "$row_headers" || return 1
    local h failures=0
    for h in "${headers[@]}"; do
        local dir=${h%/*} line
        [ "$dir" = "$h" ] && dir=.
        while IFS= read -r line; do
            [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] || continue
            local target rel
            target=$(realpath -m -- "$root/$dir/${BASH_REMATCH[1]}")
            [[ $target == "$(realpath -m -- "$root")"/* ]] || continue
            rel=${target#"$(realpath -m -- "$root")"/}
            [[ $rel == */* ]] && continue # detail/: not a public header
            local a ok=0
            local -a allowed
            read -r -a allowed <<<"$row_files"
            for a in "${allowed[@]}"; do
                if [[ $a == *:* ]]; then
                    [ "${a%%:*}" = "$h" ] && [ "${a#*:}" = "$rel" ] && ok=1
                else
                    [ "$a" = "$rel" ] && ok=1
                fi
            done
            if [ $ok -eq 0 ]; then
                echo "numaplace/$h includes the public header $rel (allowed: $row_files)"
                failures=$((failures + 1))
            fi
        done <"$root/$h"
    done
    [ $failures -eq 0 ] && echo "${#headers[@]} header(s) checked: their public includes are allowed"
    [ $failures -eq 0 ]
}

# Lines of the headers under include/numaplace matching an extended regex, comment lines left out (and
# what follows // on a line), except in the files named. Prints file:line: text.
grep_code() {
    local include=$1 regex=$2 keep_comments=$3
    shift 3
    local f
    while IFS= read -r f; do
        local rel=${f#"$include"/numaplace/} skip=0 x
        for x in "$@"; do [ "$rel" = "$x" ] && skip=1; done
        [ $skip -eq 1 ] && continue
        if [ "$keep_comments" = yes ]; then
            grep -nE -- "$regex" "$f" | sed "s|^|numaplace/$rel:|"
        else
            awk -v re="$regex" -v name="numaplace/$rel" '
                /^[[:space:]]*(\/\/|\/\*|\*)/ { next }
                { code = $0; sub(/\/\/.*/, "", code); if (code ~ re) print name ":" FNR ": " $0 }' "$f"
        fi
    done < <(find "$include/numaplace" -name '*.hpp' | sort)
}

check_syscalls() {
    local include=$1 hits
    # (::|\b)name\s*\( in ERE for awk: preceded by a non-word character or at the start of the line
    local calls='mmap|munmap|madvise|mremap|mincore|syscall|shm_open|shm_unlink|ftruncate|sys_mbind|sys_move_pages|sys_set_mempolicy'
    hits=$(grep_code "$include" "(^|[^A-Za-z0-9_])($calls)[[:space:]]*[(]" no detail/linux.hpp)
    if [ -n "$hits" ]; then
        echo "raw system calls outside detail/linux.hpp (add an os_* function there and call it):"
        echo "$hits"
        return 1
    fi
    echo "no raw system call outside detail/linux.hpp"
}

check_atfork() {
    local include=$1 hits
    hits=$(grep_code "$include" 'pthread_atfork' yes detail/fork.hpp)
    if [ -n "$hits" ]; then
        echo "pthread_atfork outside detail/fork.hpp (register a hook in a detail::fork_stage instead):"
        echo "$hits"
        return 1
    fi
    echo "pthread_atfork only in detail/fork.hpp"
}

check_lines() {
    local include=$1 max=${2:-450} f n failures=0
    while IFS= read -r f; do
        n=$(wc -l <"$f")
        if [ "$n" -gt "$max" ]; then
            echo "${f#"$include"/}: $n lines (at most $max: one concern per header)"
            failures=$((failures + 1))
        fi
    done < <(find "$include" -name '*.hpp' | sort)
    [ $failures -eq 0 ] && echo "every header under $include has at most $max lines"
    [ $failures -eq 0 ]
}

[ $# -ge 2 ] || die "usage: layering.sh pulls|probe|direct|syscalls|atfork|lines ..."
case $1 in
pulls | probe) [ $# -eq 7 ] || die "usage: layering.sh $1 <rule> <table> <include-dir> <source> <c++> <flags>"
    check_pulls "$@" ;;
direct) [ $# -eq 4 ] || die "usage: layering.sh direct <rule> <table> <include-dir>"
    check_direct "$2" "$3" "$4" ;;
syscalls) check_syscalls "$2" ;;
atfork) check_atfork "$2" ;;
lines) check_lines "$2" "${3:-450}" ;;
*) die "unknown check $1" ;;
esac
