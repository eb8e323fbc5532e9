#!/bin/sh
# A compiler launcher for compile checks: runs the compile command it is given with -fsyntax-only
# (the source parsed and its templates instantiated, no code generated), then creates the object
# file the command names, empty, so that the build tool counts the check as done and runs it
# again only when the source or a header it read changes (the depfile is still written). A
# precompiled header's command (its output a .gch) runs as given.
#   set_target_properties(T PROPERTIES CXX_COMPILER_LAUNCHER <this script>)   (ftopt_syntax_check)
out=
previous=
for arg in "$@"; do
  if [ "$previous" = "-o" ]; then out=$arg; fi
  previous=$arg
done
case "$out" in
  *.gch) exec "$@" ;;
esac
"$@" -fsyntax-only || exit $?
if [ -n "$out" ]; then : > "$out"; fi
