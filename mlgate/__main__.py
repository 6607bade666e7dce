from mlgate.cli.main import main

if __name__ == "__main__":  # a spawned worker imports the parent's main module; it must not run the CLI again
    main()
