from mlgate.cli.main import main

main()
