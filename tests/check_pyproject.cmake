# CTest build.pip_out_of_tree (issue 24, class 6): `pip install .` must not write into the source
# tree, so that it works from a read-only checkout. scikit-build-core writes only into its build
# directory; pyproject.toml must leave it unset (a temporary directory) or put it outside the tree.
file(STRINGS "${PYPROJECT}" lines REGEX "^[ \t]*build-dir[ \t]*=")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^[^=]*=[ \t]*\"([^\"]*)\".*$" "\\1" dir "${line}")
  if(NOT IS_ABSOLUTE "${dir}")
    message(FATAL_ERROR "pyproject.toml: build-dir = \"${dir}\" is inside the source tree; `pip install` from a read-only checkout fails")
  endif()
endforeach()
message(STATUS "pyproject.toml: no build directory inside the source tree")
