from bcgprof.cli import main

main()
