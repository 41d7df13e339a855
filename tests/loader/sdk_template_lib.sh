# What the SDK template tests (sdk_template_test.sh, sdk_model_template_test.sh)
# share; sourced by them, with $src $build $cc $cmake $tmp set.

# sdk_build_template KIND DIR LIB: installs the SDK component of $build into
# $tmp/prefix, copies sdk/templates/KIND to $tmp/DIR (the developer's copy:
# nothing from the source tree but it), builds it out of tree through
# find_package(MetaInferSDK) into $tmp/build, and checks that the plugin
# $tmp/build/LIB exports nothing but its descriptor entry point.
sdk_build_template() {
  echo "== install the SDK component into $tmp/prefix"
  "$cmake" --install "$build" --prefix "$tmp/prefix" --component sdk >/dev/null
  cp -r "$src/sdk/templates/$1" "$tmp/$2"

  echo "== CMake route: find_package(MetaInferSDK)"
  "$cmake" -S "$tmp/$2" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS=-Werror >"$tmp/configure.log" 2>&1 \
    || { cat "$tmp/configure.log"; exit 1; }
  "$cmake" --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
  test -f "$tmp/build/$3"
  if nm -D --defined-only "$tmp/build/$3" | grep ' T ' | grep -v ' mi_plugin_get_descriptor$'; then
    echo "FAIL: the template exports more than its descriptor"; exit 1
  fi
}
