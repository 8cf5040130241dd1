# hvd.init() under the engines' own PyTorch launchers: Spark's TorchDistributor
# (one local SparkSession) and Ray Train's TorchTrainer (one local ray.init).
# Reported as skipped, with the reason, when the engine, Java or Ray Train's
# dependencies are not installed; -s shows the start-up times they print.
set(HVL_LAUNCHERS_ENGINE_SKIP
  "is not installed [(]ci/setup_venv.sh installs it[)];pyspark needs Java;Ray Train cannot be imported")
foreach(suite "spark=test_spark_distributor.py" "ray=test_ray_train.py")
  string(REPLACE "=" ";" suite "${suite}")
  list(GET suite 0 engine)
  list(GET suite 1 file)
  add_test(NAME py_launchers_${engine}
    COMMAND ${Python_EXECUTABLE} -m pytest -q -rs -s -p no:cacheprovider --color=no ${CMAKE_CURRENT_LIST_DIR}/${file}
    WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
  set_tests_properties(py_launchers_${engine} PROPERTIES
    ENVIRONMENT "${HVL_PY_TEST_ENV}" TIMEOUT 600 SKIP_RETURN_CODE 5
    SKIP_REGULAR_EXPRESSION "${HVL_LAUNCHERS_ENGINE_SKIP}")
endforeach()
